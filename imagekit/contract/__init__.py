"""What the host and the image agree on, defined once: label keys, exit codes, the GPU
product table, the checks' tolerances, image references, and the readers both sides share.

Standard library only: it is copied into every image beside imagekit/selfcheck and
imagekit/runtime (builder/context.py), which import it there, and the host side imports the
same modules (tests/test_contract.py holds it to that).
"""
