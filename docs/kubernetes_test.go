package docs

import (
	"os"
	"regexp"
	"strings"
	"testing"

	"gopkg.in/yaml.v3"
)

// TestKubernetesManifest: deployment.md has one Kubernetes manifest, one
// readiness probe, and that manifest parses, probes the production
// example's probe listener as the page says (every second, out at the
// first failure), and sets only environment the production example reads.
func TestKubernetesManifest(t *testing.T) {
	b, err := os.ReadFile("deployment.md")
	if err != nil {
		t.Fatal(err)
	}
	page := string(b)
	if n := strings.Count(page, "readinessProbe:"); n != 1 {
		t.Fatalf("deployment.md has %d readiness probes, want the manifest's one", n)
	}
	m := regexp.MustCompile("(?s)<!-- kubernetes -->\\s*```yaml\\n(.*?)```\\s*<!-- /kubernetes -->").FindStringSubmatch(page)
	if m == nil {
		t.Fatal("deployment.md has no <!-- kubernetes --> manifest")
	}
	var set struct {
		Kind string
		Spec struct {
			Replicas int
			Template struct {
				Spec struct {
					Containers []struct {
						Env []struct {
							Name string
						}
						Ports []struct {
							Name          string
							ContainerPort int `yaml:"containerPort"`
						}
						ReadinessProbe struct {
							HTTPGet struct {
								Path string
								Port string
							} `yaml:"httpGet"`
							PeriodSeconds    int `yaml:"periodSeconds"`
							FailureThreshold int `yaml:"failureThreshold"`
						} `yaml:"readinessProbe"`
					}
				}
			}
		}
	}
	if err := yaml.Unmarshal([]byte(m[1]), &set); err != nil {
		t.Fatalf("the manifest is not YAML: %v", err)
	}
	if set.Kind != "StatefulSet" || set.Spec.Replicas != 2 || len(set.Spec.Template.Spec.Containers) != 1 {
		t.Fatalf("manifest %+v, want a StatefulSet of two with one container", set)
	}
	c := set.Spec.Template.Spec.Containers[0]
	if p := c.ReadinessProbe; p.HTTPGet.Path != "/readyz" || p.HTTPGet.Port != "probes" || p.PeriodSeconds != 1 || p.FailureThreshold != 1 {
		t.Fatalf("readiness probe %+v, want /readyz on the probe port every second, out at the first failure", p)
	}
	example, err := os.ReadFile("../Caddyfile.production.example")
	if err != nil {
		t.Fatal(err)
	}
	ports := map[string]int{}
	for _, p := range c.Ports {
		ports[p.Name] = p.ContainerPort
	}
	if ports["probes"] != 8081 || !strings.Contains(string(example), "{$QUEENGATE_PROBE_PORT:8081}") {
		t.Fatalf("the probe port %d is not the production example's default 8081", ports["probes"])
	}
	for _, e := range c.Env {
		if strings.HasPrefix(e.Name, "POD_") {
			continue // the pod's own, read by the lines below it
		}
		if !strings.Contains(string(example), e.Name) {
			t.Errorf("the manifest sets %s, which Caddyfile.production.example does not read", e.Name)
		}
	}
}
