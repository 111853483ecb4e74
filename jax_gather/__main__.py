from jax_gather.cli import main

raise SystemExit(main())
