package limits

import (
	"context"
	"errors"
	"fmt"
	"math"
	"net/http"
	"strconv"
	"time"

	"github.com/queengate/queengate/internal/cellclient"
	"github.com/queengate/queengate/wire"
)

// ClusterRef is one cluster as the inventory reconciler sees it: where its
// queues live and its storage cap.
type ClusterRef struct {
	ID string
	// BrokerTenant is the cluster's queue namespace on the broker, sent as
	// x-queen-tenant.
	BrokerTenant string
	// CellID is the cluster's cell (cells.id); it names the cell to
	// Reconciler.OnReporting.
	CellID string
	// CellURL is the base URL of the cluster's cell, e.g.
	// "http://192.0.2.7:6632".
	CellURL string
	// Authorization is the complete Authorization header value for the
	// cell (e.g. "Bearer <cell secret>"); empty sends none.
	Authorization string
	// MaxRetainedBytes is the cluster's effective max_retained_bytes.
	MaxRetainedBytes Cap
}

// Inventory is what the broker reports about one cluster's queues.
type Inventory struct {
	// Queues are the cluster's queues with the broker's partition counts
	// (which include "Default" when the queue has it).
	Queues []QueueRow
	// RetainedBytes is the cluster's storage use: the sum of the queues'
	// retainedBytes plus the listing's kvBytes and timerBytes.
	RetainedBytes int64
	// Supported is false when the listing carries no byte count at all:
	// brokers older than 0.16 (like the recorded 0.15.1) report no
	// retainedBytes. A listing with no queues and no kvBytes/timerBytes
	// proves nothing either way and also reports false.
	Supported bool
}

const (
	// inventoryTimeout bounds one listing request when ctx has no deadline.
	inventoryTimeout = 10 * time.Second
	// inventoryMaxBody caps the listing read.
	inventoryMaxBody = 16 << 20
	// inventoryPath asks for the queue listing from the broker's cached
	// statistics rather than a live per-partition count.
	inventoryPath = "/api/v1/resources/queues?stats=cached"
)

// ReadInventory reads one cluster's queue listing from its cell
// (GET <CellURL>/api/v1/resources/queues with x-queen-tenant and the cell's
// Authorization). An answer that is not a 2xx JSON object with a "queues"
// array is an error (the broker reports many errors as HTTP 200 with an
// {"error": ...} body): the caller must then change nothing for the
// cluster. client nil means the cell client's shared one.
func ReadInventory(ctx context.Context, client *http.Client, c ClusterRef) (Inventory, error) {
	cell := cellclient.Client{HTTP: client, BaseURL: c.CellURL, Authorization: c.Authorization,
		Timeout: inventoryTimeout, MaxAnswer: inventoryMaxBody}
	a, err := cell.Do(ctx, cellclient.Request{Method: http.MethodGet, Path: inventoryPath, Tenant: c.BrokerTenant})
	if err != nil {
		return Inventory{}, fmt.Errorf("queue inventory: %w", err)
	}
	if !a.OK() {
		return Inventory{}, fmt.Errorf("queue inventory: broker answered HTTP %d %s", a.Status, http.StatusText(a.Status))
	}
	return parseInventory(c.ID, a.Body)
}

// parseInventory reads a queue listing:
// {"queues":[{"name":..., "partitions":..., "retainedBytes":...}, ...],
// "kvBytes"?:..., "timerBytes"?:...}, by package wire's grammar and its
// rules of answers: names exactly, the last of a repeated member.
func parseInventory(clusterID string, body []byte) (Inventory, error) {
	if err := wire.Check(body); err != nil {
		return Inventory{}, fmt.Errorf("queue inventory: %w", err)
	}
	i := wire.SkipSpace(body, 0)
	if body[i] != '{' {
		return Inventory{}, errors.New("queue inventory: not a JSON object")
	}
	var top [4][]byte // queues, kvBytes, timerBytes, error
	wire.MemberValues(body, i, []string{"queues", "kvBytes", "timerBytes", "error"}, top[:])
	queues := top[0]
	if len(queues) == 0 || queues[0] != '[' {
		if msg, ok := wire.StringValue(top[3]); ok {
			return Inventory{}, fmt.Errorf("queue inventory: broker error %q", msg)
		}
		return Inventory{}, errors.New("queue inventory: the answer has no queues array")
	}
	var inv Inventory
	queueMembers := []string{"name", "partitions", "retainedBytes"}
	for it := wire.Array(queues); ; {
		raw, more := it.Next()
		if !more {
			break
		}
		if raw[0] != '{' {
			continue
		}
		var q [3][]byte
		wire.MemberValues(raw, 0, queueMembers, q[:])
		name, ok := wire.StringValue(q[0])
		if !ok {
			continue
		}
		parts, _ := jsonInt(q[1])
		inv.Queues = append(inv.Queues, QueueRow{ClusterID: clusterID, Name: name, Partitions: int(min(max(parts, 0), math.MaxInt32))})
		if n, ok := jsonInt(q[2]); ok && n >= 0 {
			inv.RetainedBytes = satAdd(inv.RetainedBytes, n)
			inv.Supported = true
		}
	}
	if inv.Queues == nil {
		inv.Queues = []QueueRow{}
	}
	for _, raw := range top[1:3] {
		if n, ok := jsonInt(raw); ok {
			inv.Supported = true
			if n > 0 {
				inv.RetainedBytes = satAdd(inv.RetainedBytes, n)
			}
		}
	}
	return inv, nil
}

// jsonInt reads an integer JSON number.
func jsonInt(raw []byte) (int64, bool) {
	n, err := strconv.ParseInt(string(raw), 10, 64)
	return n, err == nil
}

// satAdd adds non-negative b to a, saturating at math.MaxInt64.
func satAdd(a, b int64) int64 {
	if b > math.MaxInt64-a {
		return math.MaxInt64
	}
	return a + b
}
