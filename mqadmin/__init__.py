"""mqadmin: the Django project and app of the job-queue inspection dashboard."""
