package mailer

import (
	"bytes"
	"embed"
	"errors"
	"fmt"
	htmltemplate "html/template"
	"io/fs"
	"os"
	"path/filepath"
	"strings"
	texttemplate "text/template"
)

// The messages the gateway sends.
const (
	TemplateInvitation        = "invitation"
	TemplatePasswordReset     = "password_reset"
	TemplateEmailVerification = "email_verification"
)

// Names are the templates, each made of <name>.subject (text),
// <name>.txt (text) and <name>.html (HTML, escaped as such).
var Names = []string{TemplateInvitation, TemplatePasswordReset, TemplateEmailVerification}

//go:embed templates/*
var defaults embed.FS

// Data is what every template may use.
type Data struct {
	// Link is the one-time link the message exists for.
	Link string
	// Email is the recipient's address.
	Email string
	// Cluster and Role are the invitation's (empty otherwise).
	Cluster string
	Role    string
	// Inviter is the e-mail of who invited or created the account, if
	// anyone.
	Inviter string
	// ExpiresIn is the link's life in words ("30 minutes", "7 days").
	ExpiresIn string
}

type templateSet struct {
	subject *texttemplate.Template
	text    *texttemplate.Template
	html    *htmltemplate.Template
}

// Templates are the parsed templates, the embedded defaults with any
// file of the operator's directory in their place.
type Templates struct{ sets map[string]templateSet }

// maxTemplateBytes bounds an operator's template file.
const maxTemplateBytes = 256 << 10

// LoadTemplates parses the default templates, each replaced by the file
// of the same name in dir when dir has one (dir "" keeps every default).
// A file of dir that names no template is an error, so a misspelt
// override does not go unnoticed.
func LoadTemplates(dir string) (*Templates, error) {
	files := map[string][]byte{}
	if err := fs.WalkDir(defaults, "templates", func(p string, d fs.DirEntry, err error) error {
		if err != nil || d.IsDir() {
			return err
		}
		b, err := defaults.ReadFile(p)
		files[filepath.Base(p)] = b
		return err
	}); err != nil {
		return nil, fmt.Errorf("mailer: default templates: %w", err)
	}
	if dir != "" {
		entries, err := os.ReadDir(dir)
		if err != nil {
			return nil, fmt.Errorf("mailer: templates directory: %w", err)
		}
		for _, e := range entries {
			if e.IsDir() || strings.HasPrefix(e.Name(), ".") {
				continue
			}
			if _, known := files[e.Name()]; !known {
				return nil, fmt.Errorf("mailer: templates directory: %s names no template (known: <%s>.subject, .txt, .html)",
					e.Name(), strings.Join(Names, "|"))
			}
			b, err := os.ReadFile(filepath.Join(dir, e.Name()))
			if err != nil {
				return nil, fmt.Errorf("mailer: template %s: %w", e.Name(), err)
			}
			if len(b) > maxTemplateBytes {
				return nil, fmt.Errorf("mailer: template %s is larger than %d bytes", e.Name(), maxTemplateBytes)
			}
			files[e.Name()] = b
		}
	}
	t := &Templates{sets: map[string]templateSet{}}
	for _, n := range Names {
		var set templateSet
		var err error
		if set.subject, err = texttemplate.New(n + ".subject").Option("missingkey=error").Parse(string(files[n+".subject"])); err != nil {
			return nil, fmt.Errorf("mailer: template %s.subject: %w", n, err)
		}
		if set.text, err = texttemplate.New(n + ".txt").Option("missingkey=error").Parse(string(files[n+".txt"])); err != nil {
			return nil, fmt.Errorf("mailer: template %s.txt: %w", n, err)
		}
		if set.html, err = htmltemplate.New(n + ".html").Option("missingkey=error").Parse(string(files[n+".html"])); err != nil {
			return nil, fmt.Errorf("mailer: template %s.html: %w", n, err)
		}
		t.sets[n] = set
		// Rendered once with sample data, so that a template that cannot
		// render (an unknown field) fails the start, not a send.
		if _, err := t.Render(n, Data{Link: "https://example.com/x", Email: "a@example.com", Cluster: "c", Role: "viewer",
			Inviter: "b@example.com", ExpiresIn: "1 hour"}); err != nil {
			return nil, err
		}
	}
	return t, nil
}

// Rendered is one message's subject and bodies.
type Rendered struct {
	Subject string
	Text    string
	HTML    string
}

// Render renders the named template.
func (t *Templates) Render(name string, d Data) (Rendered, error) {
	set, ok := t.sets[name]
	if !ok {
		return Rendered{}, fmt.Errorf("mailer: no template %q", name)
	}
	var subj, text, html bytes.Buffer
	if err := set.subject.Execute(&subj, d); err != nil {
		return Rendered{}, fmt.Errorf("mailer: template %s.subject: %w", name, err)
	}
	if err := set.text.Execute(&text, d); err != nil {
		return Rendered{}, fmt.Errorf("mailer: template %s.txt: %w", name, err)
	}
	if err := set.html.Execute(&html, d); err != nil {
		return Rendered{}, fmt.Errorf("mailer: template %s.html: %w", name, err)
	}
	// A subject is one header line: whatever a template wrote over
	// several lines is joined.
	s := strings.Join(strings.Fields(subj.String()), " ")
	if s == "" {
		return Rendered{}, errors.New("mailer: template " + name + ".subject rendered empty")
	}
	return Rendered{Subject: s, Text: text.String(), HTML: html.String()}, nil
}
