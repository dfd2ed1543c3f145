import sys

try:
    from harness.cli import main

    sys.exit(main())
except KeyboardInterrupt:  # Ctrl-C before main()'s own handler was in place
    print("\nscatterbench: interrupted", file=sys.stderr)
    sys.exit(130)
