package controlplane

import (
	"context"
	"encoding/json"
)

// RemovedCell is what RemoveCell removed.
type RemovedCell struct {
	ID      string `json:"cell_id"`
	Slug    string `json:"slug"`
	Region  string `json:"region"`
	BaseURL string `json:"base_url"`
	Class   string `json:"class"`
	// ResidueForgotten lists the keepers whose queues were left on the
	// broker, when the removal was told to forget them.
	ResidueForgotten json.RawMessage `json:"residue_forgotten,omitempty"`
}

// RemoveCell deletes a cell through queen_proxy.remove_cell: refused
// (WrongState) while any cluster is placed on it, saying how many and how
// to move them, and while its broker holds queues a keeper left there
// unless forgetResidue says the broker is retired with its data. The
// removal is recorded in the outbox (cell_removed); a cell without
// clusters has nothing cached on any gateway.
func RemoveCell(ctx context.Context, db DB, cell string, forgetResidue bool) (RemovedCell, error) {
	c, err := lookupCell(ctx, db, cell)
	if err != nil {
		return RemovedCell{}, err
	}
	var raw []byte
	if err := db.QueryRow(ctx, `SELECT queen_proxy.remove_cell($1::uuid, $2)`, c.ID, forgetResidue).Scan(&raw); err != nil {
		return RemovedCell{}, dbError("remove cell", err)
	}
	var out RemovedCell
	if err := json.Unmarshal(raw, &out); err != nil {
		return RemovedCell{}, errorf(Failed, "remove cell: unreadable answer %s: %v", raw, err)
	}
	if string(out.ResidueForgotten) == "null" {
		out.ResidueForgotten = nil
	}
	return out, nil
}
