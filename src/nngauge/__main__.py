"""``python -m nngauge``: the same as the ``nngauge`` command."""

from nngauge.cli import main

if __name__ == "__main__":
    main()
