"""``[retention]``: days kept per kind of personal data, checked at load, applied as every family's TTL."""

from __future__ import annotations

import pytest

from contracts.config import Config
from contracts.retention import DAY_S, Retention, with_ttl
from contracts.tables import captures, console, surveillance
from deploy import retention as tool
from spark_jobs.ingest_captures import parse_args


def test_defaults_are_the_documented_ones_and_the_shipped_config_agrees() -> None:
    assert Retention() == Retention(captures_days=90, hits_days=365, audit_days=1095)
    from contracts.config import load
    assert Retention.from_config(load()) == Retention()
    assert Retention(captures_days=0.5).captures_ttl_s == DAY_S // 2


@pytest.mark.parametrize(("section", "message"), [
    ({"captures_days": 0}, "retention.captures_days"),
    ({"hits_days": -3}, "retention.hits_days"),
    ({"audit_days": "forever"}, "retention.audit_days"),
    ({"audit_days": True}, "retention.audit_days"),
    ({"video_days": 3}, "unknown keys: video_days"),
])
def test_bad_values_name_the_key(section: dict[str, object], message: str) -> None:
    with pytest.raises(ValueError, match=message):
        Retention.from_config(Config({"retention": section}))


def test_every_family_of_every_table_gets_the_ttl_and_keeps_its_other_options() -> None:
    layouts = with_ttl(captures.TABLES, 60)
    assert set(layouts) == set(captures.TABLES)
    assert all(options == {"max_versions": 1, "time_to_live": 60}
               for families in layouts.values() for options in families.values())


def test_the_show_command_prints_an_alter_per_family_with_the_configs_days(tmp_path, capsys) -> None:
    config = tmp_path / "solution.toml"
    config.write_text("[retention]\ncaptures_days = 1\nhits_days = 2\naudit_days = 3\n")
    assert tool.main(["--show", "--data-dir", str(tmp_path)]) == 0
    printed = capsys.readouterr().out.splitlines()
    assert printed[0] == "# captures 1 days, hits 2 days, audit 3 days"
    assert "alter 'vehicle_by_plate', NAME => 'i', TTL => 86400" in printed
    assert f"alter '{surveillance.BY_WATCH_TABLE}', NAME => 'h', TTL => 172800" in printed
    assert f"alter '{console.AUDIT_TABLE}', NAME => 'a', TTL => 259200" in printed
    assert "mc ilm rule add --expire-days 1 <alias>/captures" in printed  # capture images go with their records
    assert len(printed) == 1 + len(captures.TABLES) + len(surveillance.TABLES) + 1 + 1 + 3
    config.write_text("[retention]\ncaptures_days = -1\n")
    with pytest.raises(SystemExit) as refused:
        tool.main(["--show", "--config", str(config)])
    assert refused.value.code == 2 and "retention.captures_days" in capsys.readouterr().err


def test_the_ingest_job_takes_the_captures_days_from_the_config_and_its_flag(tmp_path, capsys) -> None:
    config = tmp_path / "solution.toml"
    config.write_text("[retention]\ncaptures_days = 7\n")
    assert parse_args(["--config", str(config)])[0].retention_days == 7
    assert parse_args(["--config", str(config), "--retention-days", "0.25"])[0].retention_days == 0.25
    with pytest.raises(SystemExit):
        parse_args(["--retention-days", "0"])
    assert "--retention-days: must be more than 0 days" in capsys.readouterr().err
