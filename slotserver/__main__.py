from slotserver.cli import main

main()
