// Package docs holds queengate's operator documentation as Markdown files.
//
// It has no code of its own: its tests keep the documentation honest. They
// check that every option the Caddyfile parsers in caddymodule accept, and
// every JSON field of the configuration they fill, appears in
// configuration.md, and README's option lists name exactly the options of
// the queen and queen_gateway parsers; that every documented `caddy queen`
// command line names a command and flags the CLI has, and operations.md has
// a row for every command; that the documented /readyz fields are the ones
// the readiness checks report; that upgrading.md names every migration;
// that every link from one Markdown file to another resolves; and that no
// file of the repository points an example at an address outside loopback
// and the documentation ranges; and that CI fuzzes every fuzz target.
package docs
