"""What imagekit writes from the cells: Dockerfiles and CI files."""
