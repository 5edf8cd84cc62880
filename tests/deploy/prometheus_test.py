"""Prometheus alerts (deploy/prometheus/alerts.yml): promtool accepts the
rules, every alert has a unit test in alerts_test.yml in which it fires on
synthetic series (and one in which it does not), and `promtool test rules`
passes. That every metric the rules name is exported is checked by the
integration test Metrics.EveryMetricMovesAndTheDashboardQueriesExist.
"""

import os
import unittest

import yaml

from harness import DEPLOY, PROMTOOL, main, run

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


if __name__ == "__main__":
    main()
