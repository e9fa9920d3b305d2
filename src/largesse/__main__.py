"""`python -m largesse ...`: the same commands as the `largesse` script (the delivery
supervisor starts its workers this way, whatever the script's path)."""

from largesse.cli import main

main()
