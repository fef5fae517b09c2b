"""Scripts that run inside an image build (standard library only): the build context carries
them as imagekit/<name>.py and the Dockerfile's RUN steps bind-mount them (builder/context.py)."""
