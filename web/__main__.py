"""``python -m web [--config F] [--host H] [--port P]``: serve the operator console (uvicorn).

``python -m web [--config F] users add NAME --role ROLE`` (password on stdin), ``users list`` and
``users remove NAME`` manage the console's users (see ``web.auth.cli``).
"""

from __future__ import annotations

import argparse
import sys
from pathlib import Path

from contracts.config import Config, add_config_flag, preparse_config
from contracts.logs import add_log_flags
from contracts.logs import setup as setup_logs
from web.auth.cli import add_users_parser, run_users
from web.settings import ConsoleSettings


def parse_args(argv: list[str] | None) -> tuple[argparse.Namespace, Config]:
    config = preparse_config(argv)
    parser = argparse.ArgumentParser(prog="python -m web", description=__doc__,
                                     formatter_class=argparse.RawDescriptionHelpFormatter)
    add_config_flag(parser)
    parser.add_argument("--host", default=None, help="listen address (default [console] host)")
    parser.add_argument("--port", type=int, default=None, help="listen port (default [console] port)")
    parser.add_argument("--data-dir", type=Path, default=None, help="console state: signing key, admin password file")
    add_log_flags(parser, level=False)
    parser.add_argument("--prometheus-url", default=None, help="Prometheus to link from the monitoring page "
                                                                "(default [prometheus] url)")
    parser.add_argument("--s3-credentials", type=Path, default=None,
                        help="the console's object-store key, an env file (make up: DATA/secrets/s3-console.env)")
    add_users_parser(parser.add_subparsers(dest="command"))
    return parser.parse_args(argv), config


def serve(settings: ConsoleSettings, log_format: str) -> int:
    import uvicorn  # the users commands do not need the server's imports

    from web.app import create_app
    from web.hardening import uvicorn_log_config

    setup_logs("console", log_format)
    tls = {"ssl_certfile": settings.tls_cert, "ssl_keyfile": settings.tls_key} if settings.tls else {}
    # The access log leaves query strings out (searched plates are personal data): see web.hardening.
    uvicorn.run(create_app(settings), host=settings.host, port=settings.port, log_level="info",
                log_config=uvicorn_log_config(), proxy_headers=False, server_header=False, **tls)
    return 0


def main(argv: list[str] | None = None) -> int:
    args, config = parse_args(argv)
    try:
        settings = ConsoleSettings.from_config(config, host=args.host, port=args.port, data_dir=args.data_dir,
                                               prometheus_url=args.prometheus_url, s3_credentials=args.s3_credentials)
    except ValueError as exc:
        print(f"bad config: {exc}", file=sys.stderr)
        return 2
    if args.command == "users":
        return run_users(args, settings)
    return serve(settings, args.log_format)


if __name__ == "__main__":
    sys.exit(main())
