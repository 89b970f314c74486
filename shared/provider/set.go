package provider

import (
	"errors"
	"fmt"
	"regexp"
	"slices"
	"strings"
)

// Route is one provider that can serve a model, and the model's name at
// that provider (a model is spelled differently by each).
type Route struct {
	Provider string
	Model    string
}

// Routes are, per model a generation may ask for, the providers that can
// serve it in order of preference (PROVIDER_ROUTES).
type Routes map[string][]Route

// routeName is what a provider name and a model name may be spelled with:
// letters, digits and the punctuation model names use, never the
// separators of the routes syntax.
var routeName = regexp.MustCompile(`^[A-Za-z0-9][A-Za-z0-9._/-]*$`)

// ParseRoutes reads PROVIDER_ROUTES:
//
//	model=provider[:provider-model][,provider[:provider-model]...][;model=...]
//
// for example "luma/ray-2-720p=replicate,runway:gen4.5": luma/ray-2-720p
// goes to Replicate under its own name, or to Runway as gen4.5. A model
// listed twice, a provider listed twice for one model, or an empty list is
// an error that names it.
func ParseRoutes(spec string) (Routes, error) {
	routes := Routes{}
	for entry := range strings.SplitSeq(spec, ";") {
		entry = strings.TrimSpace(entry)
		if entry == "" {
			continue
		}
		model, list, ok := strings.Cut(entry, "=")
		model = strings.TrimSpace(model)
		if !ok || !routeName.MatchString(model) {
			return nil, fmt.Errorf("route %q: want model=provider[:provider-model][,provider[:provider-model]]", entry)
		}
		if _, dup := routes[model]; dup {
			return nil, fmt.Errorf("model %q is routed twice", model)
		}
		var rs []Route
		for item := range strings.SplitSeq(list, ",") {
			name, remote, _ := strings.Cut(strings.TrimSpace(item), ":")
			if remote == "" {
				remote = model
			}
			if !routeName.MatchString(name) || !routeName.MatchString(remote) {
				return nil, fmt.Errorf("model %q: provider %q is not provider[:provider-model]", model, item)
			}
			if slices.ContainsFunc(rs, func(r Route) bool { return r.Provider == name }) {
				return nil, fmt.Errorf("model %q lists provider %q twice", model, name)
			}
			rs = append(rs, Route{Provider: name, Model: remote})
		}
		routes[model] = rs
	}
	return routes, nil
}

// Set is every provider a process can call, by name, and the routes that
// choose among them. Stages that follow a job (poll, fetch, cancel,
// reconcile) take the client the job's attempt names; the submit stage
// routes a new attempt with [Set.Candidates].
type Set struct {
	clients map[string]Client
	order   []string
	routes  Routes
}

// NewSet checks that every route names a client of the set and every
// model in models has a route, so a configuration that would strand a
// task is refused at start. Nil routes send every model to the first
// client under the model's own name.
func NewSet(clients []Client, routes Routes, models []string) (*Set, error) {
	if len(clients) == 0 {
		return nil, errors.New("no provider client configured")
	}
	s := &Set{clients: map[string]Client{}, routes: routes}
	for _, c := range clients {
		if _, dup := s.clients[c.Name()]; dup {
			return nil, fmt.Errorf("provider %q configured twice", c.Name())
		}
		s.clients[c.Name()] = c
		s.order = append(s.order, c.Name())
	}
	if s.routes == nil {
		// Every model goes to the first client (see Routes): nothing to
		// check.
		return s, nil
	}
	for model, rs := range s.routes {
		for _, r := range rs {
			if _, ok := s.clients[r.Provider]; !ok {
				return nil, fmt.Errorf("PROVIDER_ROUTES: model %q names provider %q, which is not configured (configured: %s)",
					model, r.Provider, strings.Join(s.order, ", "))
			}
		}
	}
	for _, m := range models {
		if len(s.routes[m]) == 0 {
			return nil, fmt.Errorf("PROVIDER_ROUTES: model %q (API_MODELS) has no provider; add %s=<provider>", m, m)
		}
	}
	return s, nil
}

// Single is the set of one client serving every model under its own name.
func Single(c Client) *Set {
	return &Set{clients: map[string]Client{c.Name(): c}, order: []string{c.Name()}}
}

// Names lists the providers, in configuration order.
func (s *Set) Names() []string { return slices.Clone(s.order) }

// Clients lists the clients, in configuration order.
func (s *Set) Clients() []Client {
	out := make([]Client, len(s.order))
	for i, n := range s.order {
		out[i] = s.clients[n]
	}
	return out
}

// Client is the named provider's client. A name the set lacks (an attempt
// recorded by a deployment with another configuration) is an error that
// says so: the caller must not guess another provider for an existing job.
func (s *Set) Client(name string) (Client, error) {
	if c, ok := s.clients[name]; ok {
		return c, nil
	}
	return nil, fmt.Errorf("provider %q is not configured in this process (configured: %s)", name, strings.Join(s.order, ", "))
}

// Routes is the model's route list; a [Single] set routes every model to
// its client.
func (s *Set) Routes(model string) []Route {
	if s.routes == nil {
		return []Route{{Provider: s.order[0], Model: model}}
	}
	return slices.Clone(s.routes[model])
}

// Candidate is a route the submit stage may try, with its client and the
// state of its circuit breaker.
type Candidate struct {
	Route
	Client  Client
	Breaker string // "closed", "half-open" or "open"
}

// Candidates are the model's routes a new attempt may go to, in the order
// to try them: providers that cannot serve the request are left out (see
// [Capable]), then those whose circuit is closed or half-open in route
// order, and those whose circuit is open last: the caller tries them only
// when nothing else is left, and their breaker refuses at once. A
// half-open circuit keeps its place, so that the preferred provider gets
// its one trial call and, once it answers, its traffic back: behind a
// healthy second provider it would never be tried again. unfit explains
// each route left out, for a task no provider can serve.
func (s *Set) Candidates(model string, req SubmitRequest) (out []Candidate, unfit []string) {
	var open []Candidate
	for _, r := range s.Routes(model) {
		c := s.clients[r.Provider]
		if capable, ok := c.(Capable); ok {
			asked := req
			asked.Model = r.Model
			if err := capable.Supports(asked); err != nil {
				unfit = append(unfit, r.Provider+": "+err.Error())
				continue
			}
		}
		cand := Candidate{Route: r, Client: c, Breaker: BreakerState(c)}
		if cand.Breaker == "open" {
			open = append(open, cand)
			continue
		}
		out = append(out, cand)
	}
	return append(out, open...), unfit
}

// BreakerState is the state of c's circuit breaker ([WithBreaker]):
// "closed", "half-open" or "open"; "closed" for a client without one.
func BreakerState(c Client) string {
	if b, ok := c.(interface{ State() string }); ok {
		return b.State()
	}
	return "closed"
}
