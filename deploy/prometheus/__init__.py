"""Prometheus for the solution: the scrape configuration `make up` writes for every process it starts, the command
that runs Debian's `prometheus` with it (`make up PROMETHEUS=1`), and the recording and alerting rules
(`*rules*.yml` in this folder, each with its promtool unit tests in `*rules_test.yml`), which `make test` checks
with `promtool check rules` and `promtool test rules`.
"""
