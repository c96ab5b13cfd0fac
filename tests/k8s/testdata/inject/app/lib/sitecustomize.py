"""The app image's own start-up hook (a company's, say): it must still run under tfboot."""

import sys

sys.app_sitecustomize_ran = True
