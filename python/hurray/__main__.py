# SPDX-License-Identifier: Apache-2.0
"""``python -m hurray``: the same command line as the ``hurray-config``
console script (:mod:`hurray._config`), for environments whose scripts
folder is not on ``PATH``::

    python -m hurray --includedir --libs
"""

import sys

from ._config import main

if __name__ == "__main__":
    sys.exit(main(prog="python -m hurray"))
