// Package docs holds queengate's operator documentation as Markdown files.
//
// It has no code of its own: its test keeps the documentation honest. It
// checks that every option the Caddyfile parsers in caddymodule accept, and
// every JSON field of the configuration they fill, appears in
// configuration.md, and that every link from one Markdown file to another
// resolves.
package docs
