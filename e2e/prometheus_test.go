package e2e

import (
	"encoding/json"
	"fmt"
	"net/http"
	"net/url"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"slices"
	"strings"
	"testing"
	"time"

	"gopkg.in/yaml.v3"

	"github.com/queengate/queengate/internal/fakebroker"
	"github.com/queengate/queengate/internal/pgtest"
)

// TestPrometheusRulesAgainstLiveGateway runs Prometheus (the server of
// Debian's prometheus package) against a gateway that leads its group, with
// the metrics listener of the production example, and queries every alert
// expression of docs/prometheus-rules.yml and every panel query of
// docs/grafana-dashboard.json through Prometheus's HTTP API: each must
// parse and evaluate, each metric it names must be in what Prometheus
// scraped, on this healthy gateway no alert may fire and every panel has
// data; then the cell fails and the upstream error alert's expression
// holds.
func TestPrometheusRulesAgainstLiveGateway(t *testing.T) {
	bin, err := exec.LookPath("prometheus")
	if err != nil {
		t.Fatalf("the prometheus server is not on PATH (%v): install Debian's prometheus package (apt-get install --no-install-recommends prometheus), as scripts/test does", err)
	}
	alerts := alertRules(t)
	panels := dashboardQueries(t)

	dbURL := pgtest.URL(t)
	// RequireTenant is a tripwire: no real broker refuses a request without x-queen-tenant; here a lost header fails loudly.
	broker := startBroker(t, fakebroker.Options{Name: "prom-cell", RequireTenant: true})
	cp := newControlPlane(t, dbURL)
	cl := cp.cluster(cp.tenant("prom"), "prom", cp.cell("prom-cell", broker.URL(), ""))
	_, key := cp.key(cl.id)
	port, metricsPort := freePort(t), freePort(t)
	startGateway(t, gatewayCaddyfile(port, dbURL, fmt.Sprintf(
		"leader_group prom-group\n\t\tgateway_name prom-gw1\n\t\tleader_group_size 1\n\t\tleader_lease_ttl 500ms\n\t\tmetrics_per_cluster\n\t\tspool_dir %s", t.TempDir()), "")+
		fmt.Sprintf("http://127.0.0.1:%d {\n\thandle /metrics {\n\t\tmetrics\n\t}\n}\n", metricsPort))

	// Traffic that makes every labelled family appear: a forwarded request
	// and a refusal, once the gateway leads.
	c := client(port)
	host := fmt.Sprintf("http://prom.eu1.example.test:%d", port)
	eventually(t, 10*time.Second, func() error {
		if r := do(t, c, "GET", host+"/api/v1/resources/queues", key, ""); r.status != http.StatusOK {
			return fmt.Errorf("read: %d %s", r.status, r.body)
		}
		return nil
	})
	assertRefusal(t, do(t, c, "GET", host+"/api/v1/resources/queues", "qk_test_unknown", ""), http.StatusUnauthorized, "unauthorized")
	eventually(t, 10*time.Second, func() error {
		r := do(t, http.DefaultClient, "GET", fmt.Sprintf("http://127.0.0.1:%d/metrics", metricsPort), "", "")
		if !strings.Contains(string(r.body), `queengate_cell_tenant_scoping{cell="prom-cell",verdict="scoped"} 1`) {
			return fmt.Errorf("the cell's isolation verdict is not scoped yet")
		}
		return nil
	})

	// Prometheus hands new targets to its scrapers at most every 5 s, so
	// the first scrape comes about 5 s after its start.
	prom := startPrometheus(t, bin, metricsPort)
	var names []string
	eventually(t, 20*time.Second, func() error {
		// rate() and increase() need two samples in their range.
		up, err := prom.query(`count_over_time(up{job="queengate"}[1m]) >= 3 and up{job="queengate"} == 1`)
		if err != nil || len(up) != 1 {
			return fmt.Errorf("not three scrapes yet: %s %v", up, err)
		}
		names, err = prom.names()
		return err
	})
	metricName := regexp.MustCompile(`\b(queengate_[a-z0-9_]+|up)\b`)
	check := func(t *testing.T, expr string) []json.RawMessage {
		t.Helper()
		used := metricName.FindAllString(expr, -1)
		if len(used) == 0 {
			t.Fatalf("%s names no queengate metric", expr)
		}
		for _, m := range used {
			if !slices.Contains(names, m) {
				t.Errorf("%s names %s, which the gateway's scrape does not have", expr, m)
			}
		}
		result, err := prom.query(expr)
		if err != nil {
			t.Fatalf("%s: %v", expr, err)
		}
		return result
	}
	for _, a := range alerts {
		t.Run(a.Alert, func(t *testing.T) {
			if firing := check(t, a.Expr); len(firing) != 0 {
				t.Errorf("fires on a healthy gateway that leads its group: %s", firing)
			}
		})
	}
	for _, p := range panels {
		t.Run("panel "+p.title, func(t *testing.T) {
			if result := check(t, p.expr); len(result) == 0 {
				t.Errorf("%s returns nothing on a gateway that serves", p.expr)
			}
		})
	}

	// And an alert does fire when its condition holds: the cell resets
	// every connection, the gateway answers 502, and the upstream error
	// share crosses 5 % at the next scrapes.
	t.Run("QueengateUpstreamErrors fires when the cell fails", func(t *testing.T) {
		i := slices.IndexFunc(alerts, func(a alertRule) bool { return a.Alert == "QueengateUpstreamErrors" })
		if i < 0 {
			t.Fatal("no QueengateUpstreamErrors rule")
		}
		broker.SetAnswerFault(fakebroker.AnswerFault{Path: "/api/v1/resources/queues", Reset: true})
		defer broker.SetAnswerFault(fakebroker.AnswerFault{})
		for range 10 {
			if r := do(t, c, "GET", host+"/api/v1/resources/queues", key, ""); r.status != http.StatusBadGateway {
				t.Fatalf("a reset by the cell answered %d %s, want 502", r.status, r.body)
			}
		}
		eventually(t, 5*time.Second, func() error {
			firing, err := prom.query(alerts[i].Expr)
			if err != nil || len(firing) != 1 {
				return fmt.Errorf("%s: %s %v", alerts[i].Expr, firing, err)
			}
			return nil
		})
	})
}

type alertRule struct {
	Alert string `yaml:"alert"`
	Expr  string `yaml:"expr"`
}

func alertRules(t *testing.T) []alertRule {
	t.Helper()
	raw, err := os.ReadFile("../docs/prometheus-rules.yml")
	if err != nil {
		t.Fatal(err)
	}
	var f struct {
		Groups []struct {
			Rules []alertRule `yaml:"rules"`
		} `yaml:"groups"`
	}
	if err := yaml.Unmarshal(raw, &f); err != nil {
		t.Fatal(err)
	}
	var out []alertRule
	for _, g := range f.Groups {
		out = append(out, g.Rules...)
	}
	if len(out) < 10 {
		t.Fatalf("%d alert rules in docs/prometheus-rules.yml", len(out))
	}
	return out
}

type panelQuery struct{ title, expr string }

// dashboardQueries returns every panel target's expression with Grafana's
// variables replaced by what they stand for here.
func dashboardQueries(t *testing.T) []panelQuery {
	t.Helper()
	raw, err := os.ReadFile("../docs/grafana-dashboard.json")
	if err != nil {
		t.Fatal(err)
	}
	var d struct {
		Panels []struct {
			Title   string `json:"title"`
			Targets []struct {
				Expr string `json:"expr"`
			} `json:"targets"`
		} `json:"panels"`
	}
	if err := json.Unmarshal(raw, &d); err != nil {
		t.Fatal(err)
	}
	vars := strings.NewReplacer("$__rate_interval", "1m", "$__range", "1h", "$instance", ".*")
	var out []panelQuery
	for _, p := range d.Panels {
		for i, tg := range p.Targets {
			out = append(out, panelQuery{title: fmt.Sprintf("%s/%d", p.Title, i), expr: vars.Replace(tg.Expr)})
		}
	}
	if len(out) < 10 {
		t.Fatalf("%d panel queries in docs/grafana-dashboard.json", len(out))
	}
	return out
}

// prometheus is a Prometheus server on loopback scraping one gateway.
type prometheus struct {
	base string
	c    *http.Client
}

func startPrometheus(t *testing.T, bin string, metricsPort int) *prometheus {
	t.Helper()
	dir := t.TempDir()
	cfg := fmt.Sprintf(`global:
  scrape_interval: 250ms
  evaluation_interval: 250ms
scrape_configs:
  - job_name: queengate
    static_configs:
      - targets: ["127.0.0.1:%d"]
`, metricsPort)
	cfgPath := filepath.Join(dir, "prometheus.yml")
	if err := os.WriteFile(cfgPath, []byte(cfg), 0o600); err != nil {
		t.Fatal(err)
	}
	webPort := freePort(t)
	logPath := filepath.Join(dir, "prometheus.log")
	logFile, err := os.Create(logPath)
	if err != nil {
		t.Fatal(err)
	}
	cmd := exec.Command(bin, "--config.file="+cfgPath, "--storage.tsdb.path="+filepath.Join(dir, "data"),
		fmt.Sprintf("--web.listen-address=127.0.0.1:%d", webPort))
	cmd.Stdout, cmd.Stderr = logFile, logFile
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		_ = cmd.Process.Kill()
		_ = cmd.Wait()
		logFile.Close()
		if t.Failed() {
			b, _ := os.ReadFile(logPath)
			t.Logf("prometheus log:\n%s", b)
		}
	})
	return &prometheus{base: fmt.Sprintf("http://127.0.0.1:%d", webPort), c: &http.Client{Timeout: 5 * time.Second}}
}

// get decodes the data of a Prometheus API answer, or its error.
func (p *prometheus) get(path string, into any) error {
	resp, err := p.c.Get(p.base + path)
	if err != nil {
		return err
	}
	defer resp.Body.Close()
	var body struct {
		Status string          `json:"status"`
		Error  string          `json:"error"`
		Data   json.RawMessage `json:"data"`
	}
	if err := json.NewDecoder(resp.Body).Decode(&body); err != nil {
		return fmt.Errorf("%s: %d: %w", path, resp.StatusCode, err)
	}
	if body.Status != "success" {
		return fmt.Errorf("%s: %s", path, body.Error)
	}
	return json.Unmarshal(body.Data, into)
}

// query evaluates expr now and returns its result series.
func (p *prometheus) query(expr string) ([]json.RawMessage, error) {
	var data struct {
		ResultType string            `json:"resultType"`
		Result     []json.RawMessage `json:"result"`
	}
	if err := p.get("/api/v1/query?query="+url.QueryEscape(expr), &data); err != nil {
		return nil, err
	}
	if data.ResultType != "vector" {
		return nil, fmt.Errorf("result type %s, want vector", data.ResultType)
	}
	return data.Result, nil
}

// names returns every metric name Prometheus holds.
func (p *prometheus) names() ([]string, error) {
	var names []string
	err := p.get("/api/v1/label/__name__/values", &names)
	return names, err
}
