"""Code that runs inside imagekit's images at every start (standard library only)."""
