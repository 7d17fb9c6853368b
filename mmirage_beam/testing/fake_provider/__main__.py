"""``python -m mmirage_beam.testing.fake_provider``: see :mod:`.command`."""

from mmirage_beam.testing.fake_provider.command import main

raise SystemExit(main())
