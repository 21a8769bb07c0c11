"""The simulator's image settings and flags, how it finds its object-store key, and make up passing it."""

from __future__ import annotations

import subprocess
from pathlib import Path
from typing import Any

import pytest

from contracts import s3_credentials
from contracts.config import Config, load
from deploy import pipeline
from deploy.pipeline import Endpoints, Pipeline
from ingest.images.render import ImageSettings
from ingest.simulate import open_images, parse_args


def test_image_settings_come_from_the_config_and_flags_override(tmp_path: Path) -> None:
    shipped, _ = parse_args([])
    assert shipped.images is False and shipped.image_settings == ImageSettings(False, 640, 360, 70)  # off in make up
    config = tmp_path / "solution.toml"
    config.write_text("[simulator]\nimages = false\nimage_width = 1280\nimage_height = 720\nimage_quality = 80\n")
    args, _ = parse_args(["--config", str(config)])
    assert args.image_settings == ImageSettings(False, 1280, 720, 80)
    args, _ = parse_args(["--config", str(config), "--images", "--image-quality", "60"])
    assert args.images is True and args.image_settings.quality == 60
    assert parse_args(["--no-images"])[0].images is False
    with pytest.raises(SystemExit):
        parse_args(["--image-quality", "0"])


def test_without_any_key_images_are_off_and_with_a_bad_key_file_it_is_an_error(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]) -> None:
    monkeypatch.delenv(s3_credentials.ACCESS_KEY_VAR, raising=False)
    monkeypatch.delenv(s3_credentials.SECRET_KEY_VAR, raising=False)
    bare = Config({})
    args, _ = parse_args(["--images"])
    assert open_images(args, bare) is None
    assert "capture images off" in capsys.readouterr().err
    loose = tmp_path / "s3-simulator.env"
    loose.write_text("AWS_ACCESS_KEY_ID=a\nAWS_SECRET_ACCESS_KEY=b\n")
    loose.chmod(0o644)
    args, _ = parse_args(["--images", "--s3-credentials", str(loose)])
    with pytest.raises(s3_credentials.CredentialsError):
        open_images(args, bare)
    loose.chmod(0o600)
    stage = open_images(args, bare)
    assert stage is not None
    stage.close()


def test_make_up_gives_the_simulator_its_key_file(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    launched: list[list[str]] = []

    class Job:
        def poll(self) -> None:
            return None

    def popen(cmd: list[str], **_kw: Any) -> Any:
        launched.append(cmd)
        return Job()

    monkeypatch.setattr(pipeline.launch, "submit", lambda *_a, **_kw: Job())
    monkeypatch.setattr(subprocess, "Popen", popen)
    config = load(None)
    key = tmp_path / "secrets" / "s3-simulator.env"
    run = Pipeline(tmp_path, Endpoints("127.0.0.1:9092", "127.0.0.1", 9090), config, simulator_key=key)
    run.start()
    assert not launched, "the simulator starts once the ingest job runs, not with it"
    run.start_devices()
    simulator = launched[0]
    assert simulator[simulator.index("--s3-credentials") + 1] == str(key)
    for handle in run._logs:
        handle.close()
