"""Superset's settings for dpsql's end-to-end test: local only (SQLite metadata in
SUPERSET_TEST_HOME, no Redis, no Celery, SQL Lab synchronous), and nothing reaching the
internet (the CSP lists no outside host, so the telemetry pixel is blocked too)."""

import os

_HOME = os.environ["SUPERSET_TEST_HOME"]

SECRET_KEY = "dpsql-superset-test-secret-key-not-for-production-0123456789"
SQLALCHEMY_DATABASE_URI = f"sqlite:///{_HOME}/superset.db?check_same_thread=false"
DATA_DIR = _HOME
UPLOAD_FOLDER = os.path.join(_HOME, "uploads")
CACHE_CONFIG = {"CACHE_TYPE": "NullCache"}
DATA_CACHE_CONFIG = {"CACHE_TYPE": "NullCache"}
RESULTS_BACKEND = None
CELERY_CONFIG = None
RATELIMIT_STORAGE_URI = "memory://"
FEATURE_FLAGS = {
    "GLOBAL_ASYNC_QUERIES": False,
    "THUMBNAILS": False,
    "ALERT_REPORTS": False,
    "ENABLE_TEMPLATE_PROCESSING": False,
}
WTF_CSRF_ENABLED = True  # the API client sends X-CSRFToken and a Referer
TALISMAN_ENABLED = True
TALISMAN_CONFIG = {
    "content_security_policy": {
        "base-uri": ["'self'"],
        "default-src": ["'self'"],
        "img-src": ["'self'", "blob:", "data:"],
        "worker-src": ["'self'", "blob:"],
        "connect-src": ["'self'"],
        "object-src": "'none'",
        "style-src": ["'self'", "'unsafe-inline'"],
        "font-src": ["'self'", "data:"],
        "script-src": ["'self'", "'strict-dynamic'"],
    },
    "content_security_policy_nonce_in": ["script-src"],
    "force_https": False,
    "session_cookie_secure": False,
}
CONTENT_SECURITY_POLICY_WARNING = False
MAPBOX_API_KEY = ""
SQLLAB_TIMEOUT = 60
