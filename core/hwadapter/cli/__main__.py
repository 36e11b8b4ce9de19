"""`python -m hwadapter.cli`, where the console script is not installed."""
import sys

from hwadapter.cli import main

if __name__ == "__main__":  # importing this module (tests/test_imports.py does) must not run the command
    sys.exit(main())
