package knative

import (
	"flag"
	"fmt"
	"net/url"
	"os"
	"regexp"
	"slices"
	"strings"
	"testing"

	"github.com/kelseyhightower/envconfig"
	"github.com/stretchr/testify/require"
	corev1 "k8s.io/api/core/v1"

	"github.com/aivedio/pipeline/shared/config"
)

// role is what one container runs, and the Config its binary loads.
type role struct {
	name   string
	newCfg func() config.Validator
}

var (
	roleStage   = role{"stage function", func() config.Validator { return &config.StageFunction{} }}
	roleAPI     = role{"api", func() config.Validator { return &config.APIServer{} }}
	roleSource  = role{"adapter source", func() config.Validator { return &config.SourceCommand{} }}
	roleRelay   = role{"adapter relay", func() config.Validator { return &config.RelayCommand{} }}
	roleDrain   = role{"adapter dlq drain", func() config.Validator { return &config.DrainCommand{} }}
	roleMigrate = role{"adapter migrate", func() config.Validator { return &config.Migrate{} }}
	roleTopics  = role{"adapter topics", func() config.Validator { return &config.Topics{} }}
)

// roleOf tells a container's role from what it runs: the Knative Services'
// containers by name, the adapter's by its command line.
func roleOf(w workload) (role, error) {
	if w.kind == "Service" {
		switch w.c.Name {
		case "function":
			return roleStage, nil
		case "api":
			return roleAPI, nil
		}
		return role{}, fmt.Errorf("%s: a Service container is named function (a stage) or api", w)
	}
	switch args := w.c.Args; {
	case len(args) > 0 && args[0] == "source":
		return roleSource, nil
	case slices.Equal(args, []string{"relay"}):
		return roleRelay, nil
	case len(args) > 1 && args[0] == "dlq" && args[1] == "drain":
		return roleDrain, nil
	case slices.Equal(args, []string{"migrate", "up"}):
		return roleMigrate, nil
	case slices.Equal(args, []string{"topics", "apply"}):
		return roleTopics, nil
	}
	return role{}, fmt.Errorf("%s: args %q are no adapter command these tests know", w, w.c.Args)
}

// envVar is one variable a Config reads.
type envVar struct {
	required bool // required and without a default: the binary refuses to start without it
	def      string
}

// readVars lists the variables cfg reads, found by envconfig's own
// reflection over the struct tags (through its usage template), so the
// names are exactly those config.Load looks up.
func readVars(cfg config.Validator) (map[string]envVar, error) {
	var out strings.Builder
	const format = "{{range .}}{{usage_key .}}\t{{usage_required .}}\t{{usage_default .}}\n{{end}}"
	if err := envconfig.Usagef("", cfg, &out, format); err != nil {
		return nil, fmt.Errorf("reflect %T: %w", cfg, err)
	}
	vars := map[string]envVar{}
	for line := range strings.Lines(out.String()) {
		f := strings.Split(strings.TrimSuffix(line, "\n"), "\t")
		if len(f) != 3 {
			return nil, fmt.Errorf("reflect %T: envconfig usage line %q", cfg, line)
		}
		vars[f[0]] = envVar{required: f[1] == "true" && f[2] == "", def: f[2]}
	}
	return vars, nil
}

// literalVars may hold a value in the manifest: they wire a container
// (which stage it serves, which port its ops server takes), they are not
// settings of an environment.
var literalVars = map[string]bool{"STAGE": true, "HTTP_ADDR": true}

// secretName matches the variables that hold credentials; DATABASE_URL and
// REDIS_URL carry passwords too.
var secretName = regexp.MustCompile(`SECRET|TOKEN|PASSWORD|ACCESS_KEY|^DATABASE_URL$|^REDIS_URL$`)

// secretRef is the Secret every credential comes from.
const secretRef = "aivedio-secrets"

// checkEnv checks one container's environment against its role's Config:
// every name is one the Config reads, every required one is set, and each
// value comes from a ConfigMap key or the Secret (credentials only from the
// Secret), never from the manifest.
func checkEnv(b *bundle, w workload, r role, secrets map[string]string) []error {
	var errs []error
	fail := func(format string, args ...any) {
		errs = append(errs, fmt.Errorf("%s (%s): %s", w, r.name, fmt.Sprintf(format, args...)))
	}
	if len(w.c.EnvFrom) > 0 {
		fail("envFrom hides which variables are set: name each one in env")
	}
	vars, err := readVars(r.newCfg())
	if err != nil {
		return []error{err}
	}
	set := map[string]bool{}
	for _, e := range w.c.Env {
		if set[e.Name] {
			fail("%s is set twice", e.Name)
		}
		set[e.Name] = true
		v, read := vars[e.Name]
		if !read {
			fail("%s is not read by its Config (renamed or misspelt?)", e.Name)
			continue
		}
		switch from := e.ValueFrom; {
		case from == nil:
			if !literalVars[e.Name] {
				fail("%s is a literal: settings come from a ConfigMap, credentials from the Secret %s", e.Name, secretRef)
			}
		case literalVars[e.Name]:
			fail("%s wires the container and is written in the manifest, not referenced", e.Name)
		case from.SecretKeyRef != nil:
			ref := from.SecretKeyRef
			if ref.Name != secretRef || ref.Key != e.Name {
				fail("%s comes from Secret %s key %s, want %s key %s", e.Name, ref.Name, ref.Key, secretRef, e.Name)
			}
			if !secretName.MatchString(e.Name) {
				fail("%s is no credential: take it from a ConfigMap", e.Name)
			}
			if _, ok := secrets[e.Name]; !ok {
				fail("%s is missing from base/secrets.example.env, which lists the Secret's keys", e.Name)
			}
			if optional := ref.Optional != nil && *ref.Optional; optional == v.required {
				fail("%s: optional is %v; a Secret key is optional exactly when its variable is not required", e.Name, optional)
			}
		case from.ConfigMapKeyRef != nil:
			ref := from.ConfigMapKeyRef
			if secretName.MatchString(e.Name) {
				fail("%s is a credential: take it from the Secret %s", e.Name, secretRef)
			}
			if ref.Key != e.Name {
				fail("%s comes from key %s: name the key after the variable", e.Name, ref.Key)
			}
			cm, ok := b.configMaps[ref.Name]
			optional := ref.Optional != nil && *ref.Optional
			switch {
			case !ok:
				fail("%s names ConfigMap %s, which is not in the manifests", e.Name, ref.Name)
			case !optional && !hasKey(cm.Data, ref.Key):
				fail("%s names key %s, which ConfigMap %s does not have", e.Name, ref.Key, ref.Name)
			case optional && v.required:
				fail("%s is required: its ConfigMap key must not be optional", e.Name)
			}
		default:
			fail("%s comes from neither a ConfigMap nor the Secret", e.Name)
		}
	}
	for name, v := range vars {
		if v.required && !set[name] {
			fail("%s is required by its Config and not set", name)
		}
	}
	return errs
}

func hasKey(m map[string]string, k string) bool {
	_, ok := m[k]
	return ok
}

// resolveEnv is the environment a container would get: literals,
// ConfigMap values, and the example Secret's placeholders. Optional
// references to missing keys leave the variable unset, as the kubelet does.
func resolveEnv(b *bundle, w workload, secrets map[string]string) map[string]string {
	env := map[string]string{}
	for _, e := range w.c.Env {
		switch from := e.ValueFrom; {
		case from == nil:
			env[e.Name] = e.Value
		case from.ConfigMapKeyRef != nil:
			if cm := b.configMaps[from.ConfigMapKeyRef.Name]; cm != nil && hasKey(cm.Data, from.ConfigMapKeyRef.Key) {
				env[e.Name] = cm.Data[from.ConfigMapKeyRef.Key]
			}
		case from.SecretKeyRef != nil:
			if v, ok := secrets[from.SecretKeyRef.Key]; ok {
				env[e.Name] = v
			}
		}
	}
	return env
}

// loadConfig loads r's Config with config.Load from exactly env: every
// other variable the Config reads is unset for the call (make test exports
// several of them). It changes the process environment, so no test of
// this package runs in parallel.
func loadConfig(t *testing.T, r role, env map[string]string) (config.Validator, error) {
	t.Helper()
	vars, err := readVars(r.newCfg())
	require.NoError(t, err)
	for name := range vars {
		t.Setenv(name, "") // restores the original value after the test
		require.NoError(t, os.Unsetenv(name))
	}
	for k, v := range env {
		t.Setenv(k, v)
	}
	cfg := r.newCfg()
	return cfg, config.Load(cfg)
}

// sourceArgs parses `source --group G --sink URL` like the adapter does.
func sourceArgs(args []string) (group, sink string, err error) {
	if len(args) == 0 || args[0] != "source" {
		return "", "", fmt.Errorf("not a source command: %q", args)
	}
	fs := flag.NewFlagSet("source", flag.ContinueOnError)
	fs.SetOutput(new(strings.Builder))
	g := fs.String("group", "", "")
	s := fs.String("sink", "", "")
	if err := fs.Parse(args[1:]); err != nil {
		return "", "", err
	}
	if fs.NArg() > 0 {
		return "", "", fmt.Errorf("unexpected arguments %q", fs.Args())
	}
	return *g, *s, nil
}

// drainGroup parses `dlq drain --group G`.
func drainGroup(args []string) (string, error) {
	if len(args) < 2 || args[0] != "dlq" || args[1] != "drain" {
		return "", fmt.Errorf("not a dlq drain command: %q", args)
	}
	fs := flag.NewFlagSet("dlq drain", flag.ContinueOnError)
	fs.SetOutput(new(strings.Builder))
	g := fs.String("group", "", "")
	if err := fs.Parse(args[2:]); err != nil {
		return "", err
	}
	if fs.NArg() > 0 {
		return "", fmt.Errorf("unexpected arguments %q", fs.Args())
	}
	return *g, nil
}

// clusterLocalURL is the address of a Knative Service inside the cluster.
func clusterLocalURL(service, namespace string) string {
	return (&url.URL{Scheme: "http", Host: service + "." + namespace + ".svc.cluster.local"}).String()
}

// TestConfigsReflect: envconfig reads every role's Config, and the
// variables the manifests cannot do without are required.
func TestConfigsReflect(t *testing.T) {
	for _, r := range []role{roleStage, roleAPI, roleSource, roleRelay, roleDrain, roleMigrate, roleTopics} {
		vars, err := readVars(r.newCfg())
		require.NoError(t, err, r.name)
		want := "DATABASE_URL"
		if r.name == roleTopics.name {
			want = "ROCKETMQ_ENDPOINT" // topics apply talks to the broker only
		}
		require.True(t, vars[want].required, "%s requires %s", r.name, want)
	}
	vars, err := readVars(roleStage.newCfg())
	require.NoError(t, err)
	require.True(t, vars["STAGE"].required)
	require.Equal(t, ":9090", vars["HTTP_ADDR"].def)
}

// TestEnvCheckCatchesDrift: the environment check is not vacuous. A
// variable renamed on one side (here the manifest's STAGE, which is what a
// renamed envconfig tag looks like from the manifest), a required one left
// out, a literal setting and a credential in a ConfigMap all fail.
func TestEnvCheckCatchesDrift(t *testing.T) {
	b := loadBase(t)
	secrets := secretExample(t)
	var stage workload
	for _, w := range b.containers() {
		if r, err := roleOf(w); err == nil && r.name == roleStage.name {
			stage = w
			break
		}
	}
	require.NotNil(t, stage.c)
	require.Empty(t, checkEnv(b, stage, roleStage, secrets), "the base itself passes")

	tests := []struct {
		name string
		edit func(env []corev1.EnvVar) []corev1.EnvVar
		want []string
	}{
		{"renamed", func(env []corev1.EnvVar) []corev1.EnvVar {
			return editEnv(env, "STAGE", func(e *corev1.EnvVar) { e.Name = "STAGE_NAME" })
		}, []string{"STAGE_NAME is not read by its Config", "STAGE is required by its Config and not set"}},
		{"required left out", func(env []corev1.EnvVar) []corev1.EnvVar {
			return slices.DeleteFunc(env, func(e corev1.EnvVar) bool { return e.Name == "REDIS_URL" })
		}, []string{"REDIS_URL is required by its Config and not set"}},
		{"literal setting", func(env []corev1.EnvVar) []corev1.EnvVar {
			return editEnv(env, "LOG_FORMAT", func(e *corev1.EnvVar) { e.Value, e.ValueFrom = "json", nil })
		}, []string{"LOG_FORMAT is a literal"}},
		{"credential in a ConfigMap", func(env []corev1.EnvVar) []corev1.EnvVar {
			return editEnv(env, "DATABASE_URL", func(e *corev1.EnvVar) {
				e.ValueFrom = &corev1.EnvVarSource{ConfigMapKeyRef: &corev1.ConfigMapKeySelector{
					LocalObjectReference: corev1.LocalObjectReference{Name: "aivedio-config"}, Key: "DATABASE_URL"}}
			})
		}, []string{"DATABASE_URL is a credential"}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			c := stage.c.DeepCopy()
			c.Env = tt.edit(c.Env)
			w := stage
			w.c = c
			var got []string
			for _, err := range checkEnv(b, w, roleStage, secrets) {
				got = append(got, err.Error())
			}
			for _, want := range tt.want {
				require.True(t, slices.ContainsFunc(got, func(s string) bool { return strings.Contains(s, want) }), "want %q among %q", want, got)
			}
		})
	}
}

func editEnv(env []corev1.EnvVar, name string, edit func(*corev1.EnvVar)) []corev1.EnvVar {
	for i := range env {
		if env[i].Name == name {
			edit(&env[i])
		}
	}
	return env
}
