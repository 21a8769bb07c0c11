"""The monitor's own Prometheus metrics (served on ``[monitoring] metrics_port``)."""

from __future__ import annotations

from prometheus_client import Counter, Gauge, Histogram

RECORDS = Counter("monitor_records_total", "Input records consumed, by topic", ["topic"])
MALFORMED = Counter("monitor_records_malformed_total",
                    "Input records set aside, by topic and reason (undecodable, not_object, invalid, future, error)",
                    ["topic", "reason"])
DUPLICATES = Counter("monitor_records_duplicate_total", "Replayed heartbeats/batches skipped (already counted)",
                     ["topic"])
MALFORMED_SILENCES = Gauge("monitor_silences_malformed",
                           "Silence rows that are not silences, left out (the others still mute)")
UNKNOWN_DEVICES = Gauge("monitor_unknown_devices", "Devices reporting that the deployment map does not know")
EVALUATIONS = Counter("monitor_evaluations_total", "Rule evaluations run")
EVALUATION_SECONDS = Histogram("monitor_evaluation_seconds", "Time one evaluation of all rules takes")
EVALUATION_ERRORS = Counter("monitor_evaluation_errors_total", "Evaluations that raised (logged, retried next tick)")
ALERTS = Gauge("monitor_alerts", "Alerts in the book, by state", ["state"])
TRANSITIONS = Counter("monitor_alert_transitions_total", "Alerts that fired or resolved", ["status"])
DEVICES = Gauge("monitor_devices", "Devices by health state", ["state"])
NOTIFICATIONS = Counter("monitor_notifications_total", "Notifications delivered", ["receiver"])
NOTIFICATION_FAILURES = Counter("monitor_notification_failures_total", "Delivery attempts that failed", ["receiver"])
NOTIFICATIONS_DROPPED = Counter("monitor_notifications_dropped_total",
                                "Notifications given up after every retry (tried again at the next flush)",
                                ["receiver"])
NOTIFICATION_SECONDS = Histogram("monitor_notification_seconds", "Time one delivery attempt takes", ["receiver"])
FLUSHES = Counter("monitor_series_flushes_total", "Series and state flushes to HBase (each followed by a commit)")
ACTIVE = Gauge("monitor_active", "1 while this instance holds the single-monitor lock and evaluates; 0 as a standby")
ALERTMANAGER_UP = Gauge("monitor_alertmanager_up",
                        "1 when the last post to this Alertmanager receiver was acknowledged, 0 when it failed",
                        ["receiver"])
ALERTMANAGER_UNSENT = Gauge("monitor_alertmanager_unsent_alerts",
                            "Alerts due to this Alertmanager that the last attempt could not deliver (retried)",
                            ["receiver"])
ALERTMANAGER_ALERTS_SENT = Counter("monitor_alertmanager_alerts_sent_total",
                                   "Alerts (firing re-sends and resolutions) Alertmanager acknowledged", ["receiver"])
ALERTMANAGER_LAST_SUCCESS = Gauge("monitor_alertmanager_last_success_timestamp_seconds",
                                  "When this Alertmanager last acknowledged a post", ["receiver"])
IMAGES_CHECKED = Counter("monitor_images_checked_total",
                         "Sampled capture images judged, by result (ok, missing, undecodable, black)", ["result"])
IMAGES_SKIPPED = Counter("monitor_images_skipped_total",
                         "Sampled capture records whose image was not judged, by reason (rate_limited: over "
                         "[monitoring.images] max_per_s; store_error: the store did not answer; no_image_url: no "
                         "image, not for a device fault)", ["reason"])
VIDEOS_CHECKED = Counter("monitor_videos_checked_total",
                         "Camera segments judged, by result (ok, undecodable, black, blurred, frozen)", ["result"])
VIDEOS_SKIPPED = Counter("monitor_videos_skipped_total",
                         "Objects in the videos bucket not judged, by reason (rate_limited: over [monitoring.video] "
                         "max_per_interval; store_error: the store did not answer; gone: deleted before it was read; "
                         "too_large: over max_bytes; empty: 0 bytes; foreign_key: not CAMERA/YYYY/MM/DD/HHMMSS_NAME; "
                         "not_segment: not a camera's scheduled segment; future: dated ahead of this host's clock)",
                         ["reason"])
