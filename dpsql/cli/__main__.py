"""python -m dpsql.cli"""

from . import main

main()
