"""``python -m web [--config F] users add NAME --role ROLE | users list | users remove NAME``.

The password of ``users add`` is one line on stdin (never an argument: arguments show in ``ps``).
Exit status 0 on success, 2 with a one-line reason on bad arguments, an existing user (add) or a
missing one (remove), 1 when HBase cannot be reached.
"""

from __future__ import annotations

import argparse
import sys
from typing import TextIO

from web.auth.roles import Role
from web.auth.users import BadUserInput, UserExists, UserStore
from web.backends import Backends, BackendUnavailable
from web.settings import ConsoleSettings

USAGE_ERROR = 2


def add_users_parser(subparsers: argparse._SubParsersAction) -> None:  # type: ignore[type-arg]
    users = subparsers.add_parser("users", help="manage console users (stored in HBase)")
    actions = users.add_subparsers(dest="action", required=True)
    add = actions.add_parser("add", help="add a user; the password is read as one line from stdin")
    add.add_argument("name")
    add.add_argument("--role", required=True, choices=[r.value for r in Role])
    actions.add_parser("list", help="list users and their roles")
    remove = actions.add_parser("remove", help="remove a user (its tokens and sessions stop working)")
    remove.add_argument("name")


def run_users(args: argparse.Namespace, settings: ConsoleSettings, stdin: TextIO = sys.stdin) -> int:
    backends = Backends(settings)
    store = UserStore(backends.hbase)
    try:
        if args.action == "add":
            return _add(store, args.name, args.role, stdin)
        if args.action == "list":
            for user in store.list():
                print(f"{user.username}\t{user.role.value}\t{user.created}")
            return 0
        if not store.remove(args.name):
            print(f"no user {args.name!r}", file=sys.stderr)
            return USAGE_ERROR
        print(f"removed {args.name}")
        return 0
    except BackendUnavailable as exc:
        print(f"cannot reach {settings.hbase.where}: {exc.error}", file=sys.stderr)
        return 1
    finally:
        backends.close()


def _add(store: UserStore, name: str, role: str, stdin: TextIO) -> int:
    line = stdin.readline()
    password = line[:-1] if line.endswith("\n") else line
    if password.endswith("\r"):
        password = password[:-1]
    try:
        store.create(name, password, role)
    except BadUserInput as exc:
        print(f"cannot add {name!r}: {exc}", file=sys.stderr)
        return USAGE_ERROR
    except UserExists:
        print(f"user {name!r} already exists (remove it first to change its password or role)", file=sys.stderr)
        return USAGE_ERROR
    print(f"added {name} ({role})")
    return 0
