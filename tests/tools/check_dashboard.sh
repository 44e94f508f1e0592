#!/bin/sh
# tests/tools/check_dashboard.sh — the Grafana dashboard docs/grafana/tally.json
# (docs/OPERATIONS.md, "Metrics, health and alerts") against what tally
# really exports: the file is JSON of Grafana's dashboard model, every panel
# and query uses the datasource variable ${DS_PROMETHEUS}, every panel's
# expr parses as PromQL (`promtool check rules` on them written as
# recording rules, Grafana's variables replaced by values), and every
# metric an expr or a variable names is a family of a live scrape of a real
# tallyd started here (with --webhooks, whose families exist only with it)
# or, for tally_relay_*, a family tally-relay writes (relay/metrics.c).
# Run by make check (TALLYD, TALLY_SRCDIR from the test environment).
set -u
: "${TALLYD:?run by make check}" "${TALLY_SRCDIR:?}"
for tool in curl promtool python3; do
    command -v $tool >/dev/null 2>&1 || { echo "check_dashboard: $tool is needed (setup.sh installs it)" >&2; exit 1; }
done
. "$TALLY_SRCDIR/tests/support/shell_test.sh"
shell_test_begin dashboard

umask 077
printf 'dashboard-secret-0123456789abcdef\n' >"$tmp/hook.secret"
printf 'hook hmac-sha256 %s\n' "$tmp/hook.secret" >"$tmp/hooks.conf"
start_tallyd_http check_dashboard --config none --data "$tmp/data" --listen "ipc://$tmp/rep" \
    --publish none --webhooks "$tmp/hooks.conf"
curl -sS --max-time 30 -o "$tmp/scrape" "$base/metrics" || fail "GET /metrics"

# The dashboard's queries as recording rules ($tmp/rules.yml) and the
# metrics they name that neither exporter has (stdout, one a line).
python3 - "$TALLY_SRCDIR/docs/grafana/tally.json" "$tmp/scrape" \
    "$TALLY_SRCDIR/relay/metrics.c" "$tmp/rules.yml" >"$tmp/unknown" 2>"$tmp/python.err" <<'PY'
import json, re, sys
dashboard_path, scrape_path, relay_source, rules_path = sys.argv[1:5]
dashboard = json.load(open(dashboard_path))
problems = []
if not isinstance(dashboard.get("panels"), list) or not dashboard.get("title"):
    problems.append("not a Grafana dashboard: no panels or title")
variables = {v["name"]: v for v in dashboard.get("templating", {}).get("list", [])}
if variables.get("DS_PROMETHEUS", {}).get("type") != "datasource" or \
        variables["DS_PROMETHEUS"].get("query") != "prometheus":
    problems.append("no datasource variable DS_PROMETHEUS of type prometheus")

def walk(panels):
    for p in panels:
        yield p
        yield from walk(p.get("panels", []))

exprs = []
for p in walk(dashboard["panels"]):
    if p.get("type") == "row":
        continue
    where = "panel %s (%r)" % (p.get("id"), p.get("title"))
    if p.get("datasource", {}).get("uid") != "${DS_PROMETHEUS}":
        problems.append(where + ": its datasource is not ${DS_PROMETHEUS}")
    if not p.get("targets"):
        problems.append(where + ": no query")
    for t in p.get("targets", []):
        if t.get("datasource", {}).get("uid") != "${DS_PROMETHEUS}":
            problems.append(where + ": a query's datasource is not ${DS_PROMETHEUS}")
        if not t.get("expr"):
            problems.append(where + ": a query without expr")
        else:
            exprs.append((where, t["expr"]))

# Grafana's variables as promtool can parse them.
def concrete(expr):
    expr = re.sub(r"\$__rate_interval|\$__interval|\$__range", "5m", expr)
    return re.sub(r"\$\{?(\w+)\}?", ".*", expr)

with open(rules_path, "w") as f:
    f.write("groups:\n  - name: dashboard\n    rules:\n")
    for i, (where, expr) in enumerate(exprs):
        f.write("      - record: dashboard:query_%d\n        expr: %s\n" % (i, json.dumps(concrete(expr))))

# The metric names of an expr: what is left once strings, label matchers,
# ranges and label lists are gone, and that is not a function, keyword or
# number.
KEYWORDS = {"by", "without", "on", "ignoring", "group_left", "group_right", "and", "or",
            "unless", "bool", "offset", "inf", "nan"}
def metric_names(expr):
    e = re.sub(r'"(\\.|[^"\\])*"', '""', concrete(expr))
    e = re.sub(r"\{[^}]*\}", "", e)
    e = re.sub(r"\[[^\]]*\]", "", e)
    e = re.sub(r"\b(by|without|on|ignoring|group_left|group_right)\s*\([^)]*\)", "", e)
    names = set()
    for m in re.finditer(r"[A-Za-z_:][A-Za-z0-9_:]*", e):
        rest = e[m.end():].lstrip()
        if rest.startswith("(") or m.group(0).lower() in KEYWORDS:
            continue
        names.add(m.group(0))
    return names

exported = {"up"}  # Prometheus's own, per target
for line in open(scrape_path):
    m = re.match(r"# TYPE (\S+) (\S+)", line)
    if m:
        exported.add(m.group(1))
        if m.group(2) == "histogram":
            exported |= {m.group(1) + s for s in ("_bucket", "_sum", "_count")}
relay = set(re.findall(r'"(tally_relay_\w+)', open(relay_source).read()))
if len(relay) < 5:
    problems.append("found only %d tally_relay_ families in %s" % (len(relay), relay_source))

used = set()
for where, expr in exprs:
    for name in metric_names(expr):
        used.add(name)
        known = relay if name.startswith("tally_relay_") else exported
        if name not in known:
            print("%s: %s in %s" % (where, name, expr))
for name, v in variables.items():
    q = v.get("query")
    q = q.get("query", "") if isinstance(q, dict) else q or ""
    for m in re.finditer(r"label_values\((\w+)", q):
        used.add(m.group(1))
        known = relay if m.group(1).startswith("tally_relay_") else exported
        if m.group(1) not in known:
            print("variable %s: %s" % (name, m.group(1)))
for p in problems:
    print(p, file=sys.stderr)
print("%d queries, %d metrics" % (len(exprs), len(used)), file=sys.stderr)
sys.exit(1 if problems or not exprs else 0)
PY
rc=$?
cat "$tmp/python.err" >&2
expect "the dashboard is Grafana's model with \${DS_PROMETHEUS} everywhere" 0 $rc
if [ -s "$tmp/unknown" ]; then
    fail "metrics the dashboard names and tally does not export:"
    cat "$tmp/unknown" >&2
    echo "the scrape's families:" >&2
    grep '^# TYPE' "$tmp/scrape" >&2
else
    ok "every metric the dashboard names is exported"
fi
promtool check rules "$tmp/rules.yml" >"$tmp/promtool" 2>&1 && grep -q SUCCESS "$tmp/promtool" &&
    ok "every query parses (promtool check rules)" ||
    { fail "a query does not parse:"; cat "$tmp/promtool" >&2; }
# the webhook panels were checked against families that were there
grep -q 'tally_webhooks_total' "$tmp/scrape" || fail "the scrape has no tally_webhooks_total (--webhooks)"
shell_test_end check_dashboard
