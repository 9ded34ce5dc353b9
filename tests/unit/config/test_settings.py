from __future__ import annotations

import pytest

from trigger_service.config.aliases import RENAMED
from trigger_service.config.settings import VARIABLES, Settings
from trigger_service.core.errors import ConfigError


def test_settings_defaults_and_errors() -> None:
    s = Settings.from_env({})
    assert s.shards == 64 and s.dispatch.retry_backoff_s == (10, 30, 120, 600, 1800)
    assert s.dispatch.max_attempts == 6 and s.direct_max_delay_s == 900
    assert s.dispatch.visibility_timeout_s > s.dispatch.callback_timeout_s
    for env in ({"TRIGGER_SHARDS": "x"}, {"TRIGGER_DIRECT_MAX_DELAY_S": "901"},
                {"TRIGGER_NOPE": "1"}, {"TRIGGER_DISPATCH_RETRY_BACKOFF_S": "1,-2"},
                {"TRIGGER_LOG_FORMAT": "xml"}):
        with pytest.raises(ConfigError) as e:
            Settings.from_env(env)
        assert next(iter(env)) in str(e.value)


def test_every_variable_default_parses_to_the_dataclass_default() -> None:
    env = {v.name: v.default for v in VARIABLES}
    from_defaults = Settings.from_env(env)
    assert from_defaults.api.port == Settings().api.port
    assert from_defaults.dispatch == Settings().dispatch
    assert from_defaults.sqs == Settings().sqs
    assert from_defaults.cassandra.hosts == Settings().cassandra.hosts


def test_sweep_settings_must_not_let_a_trigger_land_behind_a_scan() -> None:
    with pytest.raises(ConfigError) as e:
        Settings.from_env({"TRIGGER_DIRECT_MAX_DELAY_S": "60", "TRIGGER_SWEEP_HORIZON_S": "60"})
    assert "TRIGGER_SWEEP_HORIZON_S" in str(e.value)
    with pytest.raises(ConfigError):
        Settings.from_env({"TRIGGER_SWEEP_HORIZON_S": "35", "TRIGGER_SWEEP_INTERVAL_S": "30"})
    ok = Settings.from_env({"TRIGGER_DIRECT_MAX_DELAY_S": "6", "TRIGGER_SWEEP_HORIZON_S": "4",
                            "TRIGGER_SWEEP_INTERVAL_S": "1", "TRIGGER_SWEEP_PROMOTE_AHEAD_S": "2"})
    assert ok.sweep.horizon_s == 4


def test_inbox_settings() -> None:
    s = Settings.from_env({"TRIGGER_INBOX_RETENTION_DAYS": "7", "TRIGGER_INBOX_HEARTBEAT_S": "0.5"})
    assert s.inbox.retention_days == 7 and s.inbox.heartbeat_s == 0.5
    assert Settings().inbox.retention_days == 90 and Settings().inbox.heartbeat_s == 15
    for env in ({"TRIGGER_INBOX_RETENTION_DAYS": "0"}, {"TRIGGER_INBOX_HEARTBEAT_S": "0"}):
        with pytest.raises(ConfigError) as e:
            Settings.from_env(env)
        assert next(iter(env)) in str(e.value)


def test_stream_caps_stay_well_below_the_connection_cap() -> None:
    s = Settings.from_env({"TRIGGER_INBOX_MAX_STREAMS": "1000",
                           "TRIGGER_INBOX_MAX_STREAMS_PER_CALLER": "1000",
                           "TRIGGER_INBOX_STREAM_MAX_LIFETIME_S": "60",
                           "TRIGGER_INBOX_STREAM_RETRY_MS": "500",
                           "TRIGGER_REDIS_MAX_CONNECTIONS": "8"})
    assert (s.inbox.max_streams, s.inbox.max_streams_per_caller) == (1000, 1000)
    assert (s.inbox.stream_max_lifetime_s, s.inbox.stream_retry_ms) == (60, 500)
    assert s.redis.max_connections == 8
    d = Settings()
    assert d.inbox.max_streams * 2 <= d.limits.max_connections
    for env, named in (
            ({"TRIGGER_INBOX_MAX_STREAMS": "1001"}, "TRIGGER_INBOX_MAX_STREAMS"),
            ({"TRIGGER_LIMITS_MAX_CONNECTIONS": "100"}, "TRIGGER_INBOX_MAX_STREAMS"),
            ({"TRIGGER_INBOX_MAX_STREAMS": "10"}, "TRIGGER_INBOX_MAX_STREAMS_PER_CALLER"),
            ({"TRIGGER_INBOX_MAX_STREAMS": "0"}, "TRIGGER_INBOX_MAX_STREAMS"),
            ({"TRIGGER_INBOX_STREAM_MAX_LIFETIME_S": "0"},
             "TRIGGER_INBOX_STREAM_MAX_LIFETIME_S"),
            ({"TRIGGER_REDIS_MAX_CONNECTIONS": "0"}, "TRIGGER_REDIS_MAX_CONNECTIONS")):
        with pytest.raises(ConfigError) as e:
            Settings.from_env(env)
        assert named in str(e.value), env


def test_triggerctls_variables_are_not_unknown_settings_but_a_typo_is() -> None:
    env = {"TRIGGER_API_URL": "http://127.0.0.1:8080", "TRIGGER_TOKEN": "dev-token",
           "TRIGGER_PROFILE": "default"}
    assert Settings.from_env(env).api.port == Settings().api.port
    with pytest.raises(ConfigError, match="TRIGGER_API_PROT"):
        Settings.from_env({"TRIGGER_API_PROT": "1"})


def test_every_name_is_trigger_section_field() -> None:
    # The top level (no section) is the few settings every process shares.
    for v in VARIABLES:
        section, attr = v.target
        assert v.name == "TRIGGER_" + "_".join(x.upper() for x in (section, attr) if x), v.name


def test_an_old_name_still_works_once_with_a_notice_and_the_new_name_wins() -> None:
    s = Settings.from_env({"TRIGGER_CALLBACK_TIMEOUT_S": "4", "TRIGGER_DISPATCHERS": "3"})
    assert s.dispatch.callback_timeout_s == 4 and s.dispatch.processes == 3
    assert len(s.notices) == 2
    assert "TRIGGER_CALLBACK_TIMEOUT_S is deprecated" in s.notices[0]
    assert "TRIGGER_DISPATCH_CALLBACK_TIMEOUT_S" in s.notices[0]
    both = Settings.from_env({"TRIGGER_MAX_ATTEMPTS": "2", "TRIGGER_DISPATCH_MAX_ATTEMPTS": "4"})
    assert both.dispatch.max_attempts == 4
    assert both.notices == ("TRIGGER_MAX_ATTEMPTS is deprecated and ignored: "
                            "TRIGGER_DISPATCH_MAX_ATTEMPTS is set too",)
    assert Settings.from_env({}).notices == ()
    # An old name's bad value is named by the new name it stands for.
    with pytest.raises(ConfigError, match="TRIGGER_DISPATCH_MAX_ATTEMPTS"):
        Settings.from_env({"TRIGGER_MAX_ATTEMPTS": "x"})


def test_every_old_name_maps_onto_a_setting_and_none_is_still_in_use() -> None:
    names = {v.name for v in VARIABLES}
    assert set(RENAMED.values()) <= names
    assert not set(RENAMED) & names
