import sys

from klaraptor.cli.main import main

sys.exit(main())
