from prefixbench.harness.cli import main

raise SystemExit(main())
