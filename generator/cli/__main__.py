"""``python -m mi_certify.generator.cli``: the mi-certify command."""

import sys

from mi_certify.generator.cli.main import main

if __name__ == "__main__":
    sys.exit(main())
