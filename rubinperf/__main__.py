from rubinperf.entry import main

raise SystemExit(main())
