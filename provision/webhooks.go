package provision

import (
	"slices"
	"strconv"
	"strings"

	"github.com/queengate/queengate/controlplane"
)

// The webhook operations call the control-plane functions `caddy queen
// webhook` calls; the checks of names, URLs, filters, overlaps and replay
// ranges are theirs.

func listWebhooks(c *call) (answer, error) {
	ws, err := controlplane.ListWebhooks(c.ctx, c.tx)
	if err != nil {
		return answer{}, err
	}
	return ok(map[string]any{"webhooks": ws}), nil
}

// webhookJSON is an endpoint as the API shows it: with its secret only in
// the answers that made it (creation, rotation).
type webhookJSON struct {
	controlplane.WebhookEndpoint
	Secret string `json:"secret,omitempty"`
}

// ensureWebhook creates the endpoint named by the path, or answers the one
// that exists when the request matches it. Its secret is answered once, on
// creation: a caller that lost it rotates it.
func ensureWebhook(c *call) (answer, error) {
	var req struct {
		URL    string    `json:"url"`
		Events *[]string `json:"events"`
	}
	if err := c.decode(&req); err != nil {
		return answer{}, err
	}
	name, err := controlplane.CheckWebhookName(c.param("webhook"))
	if err != nil {
		return answer{}, &fieldError{"webhook", err}
	}
	url := ""
	if req.URL != "" {
		if url, err = controlplane.CheckWebhookURL(req.URL); err != nil {
			return answer{}, &fieldError{"url", err}
		}
	}
	var events []string
	if req.Events != nil {
		if events, err = controlplane.CheckWebhookEvents(*req.Events); err != nil {
			return answer{}, &fieldError{"events", err}
		}
	}
	c.target = name
	w, err := controlplane.GetWebhook(c.ctx, c.tx, name)
	switch {
	case err == nil:
		var d differs
		d.check("name", w.Name, name)
		d.check("url", w.URL, url)
		if req.Events != nil {
			d.check("events", eventList(w.Events), eventList(events))
		}
		return ok(webhookJSON{WebhookEndpoint: w}), d.err("webhook endpoint", name)
	case controlplane.KindOf(err) != controlplane.NotFound:
		return answer{}, err
	}
	if url == "" {
		if _, err := controlplane.CheckWebhookURL(""); err != nil {
			return answer{}, &fieldError{"url", err}
		}
	}
	s, err := controlplane.AddWebhook(c.ctx, c.tx, controlplane.NewWebhook{Name: name, URL: url, Events: events})
	if err != nil {
		return answer{}, err
	}
	return created(webhookJSON{WebhookEndpoint: s.WebhookEndpoint, Secret: s.Secret}), nil
}

// eventList is a filter as an ensure compares it: a set, "all" when empty.
func eventList(events []string) string {
	if len(events) == 0 {
		return "all"
	}
	s := slices.Clone(events)
	slices.Sort(s)
	return strings.Join(slices.Compact(s), ",")
}

func getWebhook(c *call) (answer, error) {
	w, err := controlplane.GetWebhook(c.ctx, c.tx, c.param("webhook"))
	if err != nil {
		return answer{}, err
	}
	c.target = w.Name
	return ok(webhookJSON{WebhookEndpoint: w}), nil
}

// setWebhookEvents replaces an endpoint's filter; [] is every kind.
func setWebhookEvents(c *call) (answer, error) {
	var req struct {
		Events *[]string `json:"events"`
	}
	if err := c.decode(&req); err != nil {
		return answer{}, err
	}
	if req.Events == nil {
		return answer{}, apiRefusal{invalidField("events", "is required ([] for every kind)")}
	}
	if _, err := controlplane.CheckWebhookEvents(*req.Events); err != nil {
		return answer{}, &fieldError{"events", err}
	}
	u := controlplane.WebhookUpdate{Events: *req.Events, AllEvents: len(*req.Events) == 0}
	return updateWebhook(c, u)
}

// setWebhookStatus disables an endpoint or makes it active again (its
// queued events are sent at once, in order).
func setWebhookStatus(c *call) (answer, error) {
	var req struct {
		Status string `json:"status"`
	}
	if err := c.decode(&req); err != nil {
		return answer{}, err
	}
	var enabled bool
	switch req.Status {
	case "active":
		enabled = true
	case "disabled":
	default:
		return answer{}, apiRefusal{invalidField("status", strconv.Quote(req.Status)+" is not active or disabled")}
	}
	w, err := controlplane.GetWebhook(c.ctx, c.tx, c.param("webhook"))
	if err != nil {
		return answer{}, err
	}
	c.target = w.Name
	if w.Status == req.Status {
		return ok(webhookJSON{WebhookEndpoint: w}), nil
	}
	return updateWebhook(c, controlplane.WebhookUpdate{Enabled: &enabled})
}

func updateWebhook(c *call, u controlplane.WebhookUpdate) (answer, error) {
	w, err := controlplane.UpdateWebhook(c.ctx, c.tx, c.param("webhook"), u)
	if err != nil {
		return answer{}, err
	}
	c.target = w.Name
	return ok(webhookJSON{WebhookEndpoint: w}), nil
}

// rotateWebhookSecret gives the endpoint a new secret; the old one keeps
// signing beside it for overlap (default a day, "0" drops it at once).
func rotateWebhookSecret(c *call) (answer, error) {
	var req struct {
		Overlap string `json:"overlap"`
	}
	if err := c.decode(&req); err != nil {
		return answer{}, err
	}
	overlap := controlplane.DefaultRotationOverlap
	if req.Overlap != "" {
		var err error
		if overlap, err = controlplane.ParseOverlap(req.Overlap); err != nil {
			return answer{}, &fieldError{"overlap", err}
		}
	}
	s, err := controlplane.RotateWebhookSecret(c.ctx, c.tx, c.param("webhook"), overlap)
	if err != nil {
		return answer{}, err
	}
	c.target = s.Name
	return ok(webhookJSON{WebhookEndpoint: s.WebhookEndpoint, Secret: s.Secret}), nil
}

// removeWebhook deletes the endpoint with its queued events and attempts.
func removeWebhook(c *call) (answer, error) {
	w, err := controlplane.RemoveWebhook(c.ctx, c.tx, c.param("webhook"))
	if err != nil {
		return answer{}, err
	}
	c.target = w.Name
	return ok(map[string]any{"removed": true, "webhook": webhookJSON{WebhookEndpoint: w}}), nil
}

// listWebhookAttempts answers the endpoint's latest attempts, newest
// first (limit, default 50, at most 1000).
func listWebhookAttempts(c *call) (answer, error) {
	raw, err := c.query("limit")
	if err != nil {
		return answer{}, err
	}
	limit := 50
	if raw != "" {
		if limit, err = strconv.Atoi(raw); err != nil || limit > 1000 {
			return answer{}, apiRefusal{invalidField("limit", "must be a whole number from 1 to 1000")}
		}
	}
	as, err := controlplane.WebhookAttempts(c.ctx, c.tx, c.param("webhook"), limit)
	if err != nil {
		if controlplane.KindOf(err) == controlplane.Invalid {
			return answer{}, &fieldError{"limit", err}
		}
		return answer{}, err
	}
	c.target = c.param("webhook")
	return ok(map[string]any{"attempts": as}), nil
}

// replayWebhook queues recorded events for the endpoint again, with their
// original ids: one event, or every event its filter takes in a range.
func replayWebhook(c *call) (answer, error) {
	var req struct {
		EventID string `json:"event_id"`
		Since   string `json:"since"`
		Until   string `json:"until"`
	}
	if err := c.decode(&req); err != nil {
		return answer{}, err
	}
	p, err := controlplane.ParseWebhookReplay(req.EventID, req.Since, req.Until)
	if err != nil {
		return answer{}, err
	}
	n, err := controlplane.ReplayWebhook(c.ctx, c.tx, c.param("webhook"), p)
	if err != nil {
		return answer{}, err
	}
	c.target = c.param("webhook")
	return ok(map[string]any{"queued": n}), nil
}
