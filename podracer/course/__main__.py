"""``python -m podracer.course``: slides, the term's releases, grading (see :func:`podracer.course.main`)."""

from podracer.course import main

raise SystemExit(main())
