from rubinperf.cli import main

raise SystemExit(main())
