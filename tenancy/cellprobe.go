package tenancy

import (
	"bytes"
	"context"
	"crypto/rand"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"net/http"
	"time"

	"github.com/queengate/queengate/internal/cellclient"
	"github.com/queengate/queengate/wire"
)

// TenantScoping is what a cell's broker does with x-queen-tenant, as the
// gateway found out by probing it.
type TenantScoping string

const (
	// ScopingUnknown: not probed since the gateway started or since the
	// cell was last unreachable, or the last probe could not decide.
	ScopingUnknown TenantScoping = "unknown"
	// ScopingScoped: the broker keeps one namespace per x-queen-tenant.
	ScopingScoped TenantScoping = "scoped"
	// ScopingUnscoped: the broker ignores x-queen-tenant, so all clusters
	// on the cell would share one namespace (the public 0.15.1 broker).
	ScopingUnscoped TenantScoping = "unscoped"
)

// ProbeQueuePrefix starts the name of the queue a scoping probe creates and
// removes.
const ProbeQueuePrefix = "queengate-isolation-probe-"

// ProbeCell is what a scoping probe needs to reach a cell.
type ProbeCell struct {
	ID      string
	Slug    string
	BaseURL string
	// Secret is the cell's static secret (cells.cell_secret), empty for
	// none; the prober derives the credential it presents from it.
	Secret string
	// Tenancy is the operator's statement (cells.tenancy_stated): "probe",
	// "scoped" or "unscoped".
	Tenancy string
}

// ProbeCellOf is the cell of a cluster.
func ProbeCellOf(c *Cluster) ProbeCell {
	return ProbeCell{ID: c.CellID, Slug: c.CellSlug, BaseURL: c.CellURL, Secret: c.CellSecret, Tenancy: c.CellTenancy}
}

// probeTimeout bounds a whole probe when the context has no deadline.
const probeTimeout = 15 * time.Second

// probeRequests is how many requests one probe sends to the cell.
const probeRequests = 5

// ProbeTenantScoping finds out whether the cell's broker scopes by
// x-queen-tenant. Under a random tenant id no cluster has (the writer), it
// configures an empty queue whose name, namespace and task are random and
// start with ProbeQueuePrefix, so that no tenant's request may name them
// (BodyNamesReserved, URLNamesReserved). It then reads the queue as the
// writer, as a second random tenant (the reader), and as the writer again,
// and removes it.
//
// The verdict needs positive evidence. Unscoped: the reader sees a queue
// of that name. Scoped: the reader is told "Queue not found" while the
// writer, before and after, sees the very queue it configured (the id the
// broker gave it, the random namespace and task). A queue deleted or
// recreated in between (what a tenant sharing an unscoped namespace would
// have to do to fake a "not found") fails the second reading and leaves
// the probe undecided, never scoped.
//
// No message is written, so no consumer on the cell can receive anything;
// the probe goes to the cell directly and is never metered. An answer that
// decides nothing returns ScopingUnknown with an error saying why.
//
// authorization is the complete Authorization header for the cell (a
// credential that may configure and delete queues); empty sends none.
func ProbeTenantScoping(ctx context.Context, client *http.Client, cell ProbeCell, authorization string) (TenantScoping, error) {
	if client == nil {
		client = http.DefaultClient
	}
	if _, ok := ctx.Deadline(); !ok {
		var cancel context.CancelFunc
		ctx, cancel = context.WithTimeout(ctx, probeTimeout)
		defer cancel()
	}
	p := &cellProbe{client: client, baseURL: cell.BaseURL, authorization: authorization,
		writer: randomUUID(), reader: randomUUID(),
		queue:     ProbeQueuePrefix + randomHex(16),
		namespace: ProbeQueuePrefix + "ns-" + randomHex(8),
		task:      ProbeQueuePrefix + "task-" + randomHex(8)}

	verdict, err := p.run(ctx)
	// Remove the queue whatever the outcome; on a broker that does not
	// scope, removing it under the writer removes it for every tenant.
	if cerr := p.removeQueue(context.WithoutCancel(ctx)); cerr != nil {
		err = errors.Join(err, cerr)
	}
	// Scoped is only ever said of a probe that went wholly as planned; an
	// unscoped verdict stands whatever else failed.
	if err != nil && verdict == ScopingScoped {
		verdict = ScopingUnknown
	}
	return verdict, err
}

// randomHex returns n random bytes in hex.
func randomHex(n int) string {
	b := make([]byte, n)
	_, _ = rand.Read(b) // crypto/rand.Read never fails
	return hex.EncodeToString(b)
}

// randomUUID returns a random (version 4) UUID in text form.
func randomUUID() string {
	var b [16]byte
	_, _ = rand.Read(b[:])
	b[6] = b[6]&0x0f | 0x40
	b[8] = b[8]&0x3f | 0x80
	h := hex.EncodeToString(b[:])
	return h[0:8] + "-" + h[8:12] + "-" + h[12:16] + "-" + h[16:20] + "-" + h[20:]
}

type cellProbe struct {
	client          *http.Client
	baseURL         string
	authorization   string
	writer, reader  string // two random broker tenant ids
	queue           string
	namespace, task string // random values only the probe knows
	queueID         string // the id the broker gave the queue
}

// errProbeQueueChanged: between the writer's readings the probe queue
// vanished or was replaced, which a broker does not do on its own; a
// "not found" for the reader then proves nothing.
var errProbeQueueChanged = errors.New("the probe queue changed between the probe's reads (deleted or recreated by someone else?); not deciding")

func (p *cellProbe) run(ctx context.Context) (TenantScoping, error) {
	body, err := json.Marshal(map[string]any{"queue": p.queue, "namespace": p.namespace, "task": p.task,
		"options": map[string]any{"leaseTime": 30}})
	if err != nil {
		return ScopingUnknown, err
	}
	var configured probeAnswer
	if err := p.call(ctx, http.MethodPost, "/api/v1/configure", p.writer, string(body), &configured,
		"configured", "error", "queue", "queueId", "namespace", "task"); err != nil {
		return ScopingUnknown, fmt.Errorf("configure the probe queue: %w", err)
	}
	if !configured.flag("configured") {
		return ScopingUnknown, fmt.Errorf("configure the probe queue: the broker answered %q", configured.text("error"))
	}
	queue, namespace, task, queueID := configured.text("queue"), configured.text("namespace"), configured.text("task"), configured.text("queueId")
	if queue != p.queue || namespace != p.namespace || task != p.task || queueID == "" {
		return ScopingUnknown, fmt.Errorf("configure the probe queue: the broker confirmed another queue (%q, namespace %q, task %q, id %q)",
			queue, namespace, task, queueID)
	}
	p.queueID = queueID

	if seen, err := p.read(ctx, p.writer); err != nil {
		return ScopingUnknown, err
	} else if !seen.exists {
		return ScopingUnknown, errors.New("the probe queue is not visible even to the tenant that configured it")
	} else if !seen.same {
		return ScopingUnknown, errProbeQueueChanged
	}
	seen, err := p.read(ctx, p.reader)
	if err != nil {
		return ScopingUnknown, err
	}
	if seen.exists {
		// Any queue of that name under a tenant id nobody else knows is
		// the shared namespace showing through.
		return ScopingUnscoped, nil
	}
	again, err := p.read(ctx, p.writer)
	if err != nil {
		return ScopingUnknown, err
	}
	if !again.same {
		return ScopingUnknown, errProbeQueueChanged
	}
	return ScopingScoped, nil
}

// probeReading is what one read of the probe queue showed.
type probeReading struct {
	exists bool // a queue of the probe's name
	same   bool // the very queue the probe configured: its id, namespace and task
}

// read asks for the probe queue under tenant. The public 0.15.1 broker
// answers an unknown queue with HTTP 200 {"error":"Queue not found"}; the
// Rust brokers (the only ones that scope by tenant) with HTTP 404 and the
// same body. Both are "absent"; any other non-2xx answer decides nothing.
func (p *cellProbe) read(ctx context.Context, tenant string) (probeReading, error) {
	var detail probeAnswer
	status, err := p.callStatus(ctx, http.MethodGet, "/api/v1/resources/queues/"+p.queue, tenant, "", &detail, http.StatusNotFound,
		"id", "name", "namespace", "task", "error")
	if err != nil {
		return probeReading{}, fmt.Errorf("read the probe queue: %w", err)
	}
	id, name, errText := detail.text("id"), detail.text("name"), detail.text("error")
	if status == http.StatusNotFound {
		if name == "" && id == "" && errText == "Queue not found" {
			return probeReading{}, nil
		}
		return probeReading{}, fmt.Errorf("read the probe queue: HTTP 404 with an unexpected answer (name %q, error %q)", name, errText)
	}
	switch {
	case name == p.queue:
		same := id == p.queueID && detail.text("namespace") == p.namespace && detail.text("task") == p.task
		return probeReading{exists: true, same: same}, nil
	case name == "" && errText == "Queue not found":
		return probeReading{}, nil
	}
	return probeReading{}, fmt.Errorf("read the probe queue: unexpected answer (name %q, error %q)", name, errText)
}

func (p *cellProbe) removeQueue(ctx context.Context) error {
	ctx, cancel := context.WithTimeout(ctx, probeTimeout)
	defer cancel()
	var deleted probeAnswer
	if err := p.call(ctx, http.MethodDelete, "/api/v1/resources/queues/"+p.queue, p.writer, "", &deleted, "deleted"); err != nil {
		return fmt.Errorf("remove the probe queue %s: %w", p.queue, err)
	}
	if !deleted.flag("deleted") {
		return fmt.Errorf("remove the probe queue %s: the broker did not delete it", p.queue)
	}
	return nil
}

func (p *cellProbe) call(ctx context.Context, method, path, tenant, body string, out *probeAnswer, names ...string) error {
	_, err := p.callStatus(ctx, method, path, tenant, body, out, 0, names...)
	return err
}

// callStatus sends one probe request and reads the named members of a 2xx
// answer, or an answer of status also (0: none), into out, and returns the
// status.
func (p *cellProbe) callStatus(ctx context.Context, method, path, tenant, body string, out *probeAnswer, also int, names ...string) (int, error) {
	a, err := cellclient.Client{HTTP: p.client, BaseURL: p.baseURL, Authorization: p.authorization}.
		Do(ctx, cellclient.Request{Method: method, Path: path, Tenant: tenant, Body: []byte(body)})
	if err != nil {
		return a.Status, err
	}
	if !a.OK() && (also == 0 || a.Status != also) {
		return a.Status, fmt.Errorf("HTTP %d: %s", a.Status, bytes.TrimSpace(a.Body[:min(len(a.Body), 200)]))
	}
	if err := out.read(a.Body, names); err != nil {
		return a.Status, err
	}
	return a.Status, nil
}

// probeAnswer is the top-level members of a cell's answer the probe reads,
// by the rules of answers (names exactly, the last of a repeated one): a
// string member as its text, a boolean as itself, absent or null as "" or
// false.
type probeAnswer struct {
	texts map[string]string
	flags map[string]bool
}

// read takes the members names of body; an answer that is not a JSON
// object, or names one of them with a value of another kind, decides
// nothing.
func (a *probeAnswer) read(body []byte, names []string) error {
	vals := make([][]byte, len(names))
	if !wire.TopMembers(body, names, vals) {
		return errors.New("the answer is not the JSON object expected")
	}
	a.texts, a.flags = map[string]string{}, map[string]bool{}
	for k, v := range vals {
		switch {
		case v == nil || string(v) == "null":
		case string(v) == "true" || string(v) == "false":
			a.flags[names[k]] = string(v) == "true"
		default:
			text, ok := wire.StringValue(v)
			if !ok {
				return fmt.Errorf("the answer's %s is neither a string nor a boolean", names[k])
			}
			a.texts[names[k]] = text
		}
	}
	return nil
}

func (a *probeAnswer) text(name string) string { return a.texts[name] }
func (a *probeAnswer) flag(name string) bool   { return a.flags[name] }
