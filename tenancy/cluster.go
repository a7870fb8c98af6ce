package tenancy

import (
	"encoding/json"
	"slices"

	"github.com/queengate/queengate/limits"
)

// Cluster is everything the request path needs to know about one cluster,
// read in one query from the cluster, its tenant, its cell and its plan.
type Cluster struct {
	ID           string // clusters.id
	TenantID     string // tenants.id
	Slug         string // clusters.slug, the first label of its hostname
	BrokerTenant string // clusters.broker_tenant_uuid, sent upstream as x-queen-tenant
	Status       Status // worst of tenant and cluster status
	PlanCode     string

	CellID     string
	CellSlug   string
	CellURL    string // cells.base_url
	CellSecret string // cells.cell_secret, presented upstream as a bearer token; may be empty

	Limits   limits.Effective
	Features Features
}

// Features are the plan's feature flags. A flag is on only when the plan's
// features object holds JSON true for it.
type Features struct {
	Streams   bool
	Traces    bool
	KV        bool
	Timers    bool
	Ephemeral bool
}

// ParseFeatures reads a plan's features JSON object. Anything that is not
// JSON true, and any unparsable document, leaves a flag off.
func ParseFeatures(raw []byte) Features {
	var m map[string]json.RawMessage
	if err := json.Unmarshal(raw, &m); err != nil {
		return Features{}
	}
	on := func(k string) bool { return string(m[k]) == "true" }
	return Features{
		Streams:   on("streams"),
		Traces:    on("traces"),
		KV:        on("kv"),
		Timers:    on("timers"),
		Ephemeral: on("ephemeral"),
	}
}

// Scope is one permission an API key carries.
type Scope string

// The API key scopes the schema allows.
const (
	ScopeProduce Scope = "produce"
	ScopeConsume Scope = "consume"
	ScopeAdmin   Scope = "admin"
	ScopeRead    Scope = "read"
)

// APIKey is a live (not revoked) API key together with the cluster it is
// bound to.
type APIKey struct {
	ID      string
	Scopes  []Scope
	Cluster *Cluster
}

// Has reports whether the key carries scope s.
func (k *APIKey) Has(s Scope) bool { return slices.Contains(k.Scopes, s) }
