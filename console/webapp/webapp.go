// Package webapp holds the cluster console: a web app of plain HTML, CSS
// and JavaScript modules with no build step, embedded in the binary and
// served at /console by the console handler.
//
// Every page and asset lives in static/ and refers to the others by
// absolute /console/ paths; the app talks only to its own origin
// (/api/console/*, /auth/*), so it works without network access.
package webapp

import (
	"embed"
	"io/fs"
)

//go:embed static
var embedded embed.FS

// FS is the app's files with index.html at the root. A handler serves
// them under /console/ and answers index.html for paths that name no
// file (the app routes on the client).
var FS fs.FS

func init() {
	sub, err := fs.Sub(embedded, "static")
	if err != nil {
		panic("webapp: " + err.Error())
	}
	FS = sub
}
