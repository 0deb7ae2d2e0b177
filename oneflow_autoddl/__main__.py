"""`python -m oneflow_autoddl`: the command line (oneflow_autoddl.cli).

Once the command is done and its output flushed, the process ends without Python's teardown:
a plan of a large model leaves millions of objects (GPT-3 175B's two searched graphs, with
all their tables) that the interpreter would free one by one, over a second, for memory the
operating system takes back at once. Every file the command writes is closed by then.
"""

import logging
import os
import sys

from .cli import main

code = main()
logging.shutdown()
sys.stdout.flush()
sys.stderr.flush()
os._exit(code)
