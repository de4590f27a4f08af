#!/usr/bin/env python3
# Merges GoogleTest JSON reports into one results file with the commit, device and command:
#   gtest_summary.py OUT.json COMMIT COMMAND REPORT.json...
import json
import subprocess
import sys

out, commit, command, files = sys.argv[1], sys.argv[2], sys.argv[3], sys.argv[4:]
dev = subprocess.run(["nvidia-smi", "--query-gpu=name,driver_version", "--format=csv,noheader"],
                     capture_output=True, text=True).stdout.strip()
res = {"commit": commit, "device": dev, "command": command, "binaries": {}}
for f in files:
    j = json.load(open(f))
    name = f.rsplit("/", 1)[1][:-5]
    cases = []
    for suite in j.get("testsuites", []):
        for c in suite.get("testsuite", []):
            status = "skipped" if c.get("result") == "SKIPPED" else ("failed" if c.get("failures") else "passed")
            cases.append({"name": f"{suite['name']}.{c['name']}", "status": status, "time": c.get("time")})
    res["binaries"][name] = {"tests": j.get("tests"), "failures": j.get("failures"), "cases": cases}
    print(f"{name}: {j.get('tests')} tests, {j.get('failures')} failures, "
          f"{sum(c['status'] == 'skipped' for c in cases)} skipped, "
          f"{sum(c['status'] == 'passed' for c in cases)} passed")
json.dump(res, open(out, "w"), indent=1)
