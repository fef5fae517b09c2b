"""Development helpers that the tests and the benches share; not part of the imagekit wheel."""
