"""Prometheus alerts (deploy/prometheus/alerts.yml): promtool accepts the
rules, every alert has a unit test in alerts_test.yml in which it fires on
synthetic series (and one in which it does not), and `promtool test rules`
passes. That every metric the rules name is exported is checked by the
integration test Metrics.EveryMetricMovesAndTheDashboardQueriesExist; that
every dashboard legend names a label its query keeps, here.
"""

import json
import os
import re
import unittest

import yaml

from harness import DASHBOARD, DEPLOY, PROMTOOL, main, run

RULES = os.path.join(DEPLOY, "prometheus", "alerts.yml")
TESTS = os.path.join(DEPLOY, "prometheus", "alerts_test.yml")


class PrometheusRulesTest(unittest.TestCase):
    def test_promtool_accepts_the_rules(self):
        out = run([PROMTOOL, "check", "rules", RULES])[1]
        self.assertIn("SUCCESS", out)

    def test_every_alert_is_shown_firing_and_quiet(self):
        with open(RULES) as f:
            alerts = {r["alert"] for g in yaml.safe_load(f)["groups"]
                      for r in g["rules"] if "alert" in r}
        with open(TESTS) as f:
            tests = yaml.safe_load(f)["tests"]
        firing, quiet = set(), set()
        for t in tests:
            for case in t.get("alert_rule_test", []):
                (firing if case["exp_alerts"] else quiet).add(
                    case["alertname"])
        self.assertGreaterEqual(len(alerts), 6)
        self.assertEqual(sorted(alerts - firing), [],
                         "alerts no test shows firing")
        self.assertEqual(sorted(alerts - quiet), [],
                         "alerts no test shows quiet on healthy series")

    def test_promtool_unit_tests_pass(self):
        code, out, err = run([PROMTOOL, "test", "rules", TESTS], check=False)
        self.assertEqual(code, 0, out + err)
        self.assertIn("SUCCESS", out)


def _targets(panels):
    for panel in panels:
        yield from _targets(panel.get("panels", []))
        for target in panel.get("targets", []):
            yield panel["title"], target


class DashboardTest(unittest.TestCase):
    def test_every_legend_names_a_label_its_query_keeps(self):
        # Grafana writes "{{label}}" as the label's value; a stray brace or
        # a label the aggregation dropped shows as literal text or nothing.
        with open(DASHBOARD) as f:
            panels = json.load(f)["panels"]
        checked = 0
        for title, target in _targets(panels):
            legend = target.get("legendFormat", "")
            names = re.findall(r"\{\{(\w+)\}\}", legend)
            rest = re.sub(r"\{\{\w+\}\}", "", legend)
            self.assertNotRegex(rest, r"[{}]",
                                f"{title}: legend {legend!r}")
            kept = re.search(r"\b(?:by|without)\s*\(([^)]*)\)",
                             target["expr"])
            if kept and kept.group(0).startswith("by"):
                labels = {l.strip() for l in kept.group(1).split(",")}
                for name in names:
                    self.assertIn(name, labels,
                                  f"{title}: {legend!r} on {target['expr']}")
            checked += len(names)
        self.assertGreater(checked, 20)


if __name__ == "__main__":
    main()
