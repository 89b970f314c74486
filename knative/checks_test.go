package knative

import (
	"context"
	"fmt"
	"net"
	"slices"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/require"
	appsv1 "k8s.io/api/apps/v1"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/labels"
	"k8s.io/apimachinery/pkg/util/intstr"
	"k8s.io/apimachinery/pkg/util/validation"
	"knative.dev/networking/pkg/apis/networking"
	"knative.dev/pkg/apis"
	"knative.dev/serving/pkg/apis/autoscaling"
	"knative.dev/serving/pkg/apis/serving"
	servingv1 "knative.dev/serving/pkg/apis/serving/v1"

	"github.com/aivedio/pipeline/shared/catalog"
	"github.com/aivedio/pipeline/shared/config"
)

// No test in this package calls t.Parallel: the environment checks set and
// unset process environment variables (loadConfig).

// TestBase checks the base as written.
func TestBase(t *testing.T) {
	checkBundle(t, loadBase(t))
}

// checkBundle runs every check on one set of manifests: the base as
// written, or what kustomize builds (TestKustomizeBuild).
func checkBundle(t *testing.T, b *bundle) {
	t.Run("knative validation", func(t *testing.T) { checkKnative(t, b) })
	t.Run("deployments", func(t *testing.T) { checkDeployments(t, b) })
	t.Run("containers", func(t *testing.T) { checkContainers(t, b) })
	t.Run("every stage has a service", func(t *testing.T) { checkStages(t, b) })
	t.Run("api", func(t *testing.T) { checkAPI(t, b) })
	t.Run("every group has a source adapter", func(t *testing.T) { checkSources(t, b) })
	t.Run("every group is drained", func(t *testing.T) { checkDrain(t, b) })
	t.Run("relay", func(t *testing.T) { checkRelay(t, b) })
	t.Run("reconcile ping", func(t *testing.T) { checkPing(t, b) })
	t.Run("no secret values", func(t *testing.T) { checkNoSecrets(t, b) })
	t.Run("environment", func(t *testing.T) { checkEnvironment(t, b) })
	t.Run("one replay window", func(t *testing.T) { checkReplayWindow(t, b) })
}

// checkKnative runs Knative's own defaulting and validation, as its
// admission webhooks would on create, with the default cluster
// configuration; warnings (such as an insecure security context) fail too.
func checkKnative(t *testing.T, b *bundle) {
	require.NotEmpty(t, b.services)
	ctx := apis.WithinCreate(context.Background())
	for _, s := range b.services {
		s = s.DeepCopy()
		s.SetDefaults(ctx)
		requireValid(t, "Service "+s.Name, s.Validate(ctx))
	}
	require.NotEmpty(t, b.pingSources)
	for _, p := range b.pingSources {
		p = p.DeepCopy()
		p.SetDefaults(ctx)
		requireValid(t, "PingSource "+p.Name, p.Validate(ctx))
	}
}

func requireValid(t *testing.T, what string, errs *apis.FieldError) {
	t.Helper()
	if e := errs.Filter(apis.ErrorLevel); e != nil {
		t.Errorf("%s is invalid: %v", what, e)
	}
	if w := errs.Filter(apis.WarningLevel); w != nil {
		t.Errorf("%s draws warnings: %v", what, w)
	}
}

// checkDeployments checks what the API server would refuse in a Deployment
// (k8s.io/api has the types but no validation; that lives in
// k8s.io/kubernetes): names, labels, a selector that selects the template,
// unique container names, mounted volumes.
func checkDeployments(t *testing.T, b *bundle) {
	require.NotEmpty(t, b.deployments)
	seen := map[string]bool{}
	for _, d := range b.deployments {
		what := "Deployment " + d.Name
		require.False(t, seen[d.Name], "%s twice", what)
		seen[d.Name] = true
		require.Empty(t, validation.IsDNS1123Subdomain(d.Name), what)
		requireLabels(t, what, d.Labels)
		requireLabels(t, what+" template", d.Spec.Template.Labels)
		require.NotNil(t, d.Spec.Replicas, "%s: say how many replicas", what)
		require.GreaterOrEqual(t, *d.Spec.Replicas, int32(1), what)
		require.NotNil(t, d.Spec.Selector, what)
		sel, err := metav1.LabelSelectorAsSelector(d.Spec.Selector)
		require.NoError(t, err, what)
		require.False(t, sel.Empty(), "%s: empty selector", what)
		require.True(t, sel.Matches(labels.Set(d.Spec.Template.Labels)), "%s: selector does not select its template", what)

		pod := d.Spec.Template.Spec
		require.NotEmpty(t, pod.Containers, what)
		require.Contains(t, []corev1.RestartPolicy{"", corev1.RestartPolicyAlways}, pod.RestartPolicy, what)
		require.NotNil(t, pod.AutomountServiceAccountToken, "%s: no process here talks to the Kubernetes API", what)
		require.False(t, *pod.AutomountServiceAccountToken, "%s: no process here talks to the Kubernetes API", what)
		names := map[string]bool{}
		mounted := map[string]bool{}
		for _, c := range slices.Concat(pod.InitContainers, pod.Containers) {
			require.False(t, names[c.Name], "%s: container %s twice", what, c.Name)
			names[c.Name] = true
			for _, m := range c.VolumeMounts {
				mounted[m.Name] = true
			}
		}
		for _, v := range pod.Volumes {
			require.True(t, mounted[v.Name], "%s: volume %s is mounted nowhere", what, v.Name)
		}
	}
}

func requireLabels(t *testing.T, what string, l map[string]string) {
	t.Helper()
	require.NotEmpty(t, l, "%s has no labels", what)
	for k, v := range l {
		require.Empty(t, validation.IsQualifiedName(k), "%s: label key %q", what, k)
		require.Empty(t, validation.IsValidLabelValue(v), "%s: label %s value %q", what, k, v)
	}
}

// checkContainers checks every container of every pod: resources, a locked
// down security context, ports, probes and mounts.
func checkContainers(t *testing.T, b *bundle) {
	for _, w := range b.containers() {
		c := w.c
		require.Empty(t, validation.IsDNS1123Label(c.Name), w.String())
		require.NotEmpty(t, c.Image, w.String())
		for _, e := range c.Env {
			require.Empty(t, validation.IsEnvVarName(e.Name), "%s: env %s", w, e.Name)
		}

		// Resources: requests and limits of CPU and memory, requests within limits.
		for _, r := range []corev1.ResourceName{corev1.ResourceCPU, corev1.ResourceMemory} {
			req, ok := c.Resources.Requests[r]
			require.True(t, ok, "%s: no %s request", w, r)
			limit, ok := c.Resources.Limits[r]
			require.True(t, ok, "%s: no %s limit", w, r)
			require.LessOrEqual(t, req.Cmp(limit), 0, "%s: %s request above its limit", w, r)
		}

		// Security: non-root, no privilege escalation, read-only root
		// filesystem, no capabilities, the runtime's seccomp profile.
		sc, psc := c.SecurityContext, w.pod.SecurityContext
		require.NotNil(t, sc, "%s: no securityContext", w)
		if psc == nil {
			psc = &corev1.PodSecurityContext{}
		}
		nonRoot := sc.RunAsNonRoot
		if nonRoot == nil {
			nonRoot = psc.RunAsNonRoot
		}
		require.True(t, nonRoot != nil && *nonRoot, "%s: runAsNonRoot", w)
		require.True(t, sc.AllowPrivilegeEscalation != nil && !*sc.AllowPrivilegeEscalation, "%s: allowPrivilegeEscalation", w)
		require.True(t, sc.ReadOnlyRootFilesystem != nil && *sc.ReadOnlyRootFilesystem, "%s: readOnlyRootFilesystem", w)
		require.True(t, sc.Capabilities != nil && slices.Contains(sc.Capabilities.Drop, "ALL") && len(sc.Capabilities.Add) == 0, "%s: drop ALL capabilities", w)
		seccomp := sc.SeccompProfile
		if seccomp == nil {
			seccomp = psc.SeccompProfile
		}
		require.True(t, seccomp != nil && seccomp.Type == corev1.SeccompProfileTypeRuntimeDefault, "%s: seccompProfile RuntimeDefault", w)

		// Mounts name volumes of the pod.
		volumes := map[string]bool{}
		for _, v := range w.pod.Volumes {
			volumes[v.Name] = true
		}
		for _, m := range c.VolumeMounts {
			require.True(t, volumes[m.Name], "%s: mounts unknown volume %s", w, m.Name)
		}

		if w.kind != "Deployment" || w.init {
			continue // Knative validates its own ports and probes
		}
		// Ports are unique in the pod and the probes find theirs.
		require.NotEmpty(t, c.Ports, "%s: declare the ops port", w)
		for _, p := range c.Ports {
			require.Empty(t, validation.IsValidPortNum(int(p.ContainerPort)), w.String())
			require.Empty(t, validation.IsValidPortName(p.Name), w.String())
		}
		require.NotNil(t, c.ReadinessProbe, "%s: readinessProbe", w)
		require.NotNil(t, c.LivenessProbe, "%s: livenessProbe", w)
		for _, p := range []*corev1.Probe{c.ReadinessProbe, c.LivenessProbe} {
			require.NotNil(t, p.HTTPGet, "%s: probes are HTTP GETs of the ops server", w)
			_, ok := portOf(c, p.HTTPGet.Port)
			require.True(t, ok, "%s: probe port %s is not a port of the container", w, p.HTTPGet.Port.String())
		}
	}
	for _, d := range b.deployments {
		ports := map[int32]string{}
		for _, c := range d.Spec.Template.Spec.Containers {
			for _, p := range c.Ports {
				other, dup := ports[p.ContainerPort]
				require.False(t, dup, "Deployment %s: port %d in %s and %s", d.Name, p.ContainerPort, other, c.Name)
				ports[p.ContainerPort] = c.Name
			}
		}
	}
}

// portOf resolves a probe's port (a number or a port name) to a port the
// container declares.
func portOf(c *corev1.Container, port intstr.IntOrString) (int32, bool) {
	for _, p := range c.Ports {
		if (port.Type == intstr.String && port.StrVal == p.Name) || (port.Type == intstr.Int && port.IntVal == p.ContainerPort) {
			return p.ContainerPort, true
		}
	}
	return 0, false
}

// functionPort is where the function image listens: its LISTEN_ADDRESS,
// [::]:8080 (Dockerfile), which is also the port Knative routes to.
const functionPort = 8080

// heavyStages run ffmpeg on whole videos: one or two jobs per pod, and
// the longest timeouts.
var heavyStages = []string{"transcode", "render"}

// checkStages: every stage of the catalog has exactly one Knative Service,
// all from one image, scaling to zero, with a concurrency, a target, a
// timeout and a bound on scale.
func checkStages(t *testing.T, b *bundle) {
	byStage := b.stageServices(t)
	images := map[string]bool{}
	maxCC := map[string]int64{}
	for _, stage := range catalog.Stages() {
		s, ok := byStage[stage]
		require.True(t, ok, "stage %s has no Knative Service (a container named function with STAGE=%s)", stage, stage)
		what := "Service " + s.Name
		spec := s.Spec.Template.Spec
		require.Len(t, spec.Containers, 1, what)
		c := spec.Containers[0]
		images[c.Image] = true

		require.Equal(t, serving.VisibilityClusterLocal, s.Labels[networking.VisibilityLabelKey], "%s: only the adapters call a stage", what)
		ann := s.Spec.Template.Annotations
		require.Equal(t, "0", ann[autoscaling.MinScaleAnnotationKey], "%s scales to zero", what)
		maxScale := positiveInt(t, what, ann, autoscaling.MaxScaleAnnotationKey)
		target := positiveInt(t, what, ann, autoscaling.TargetAnnotationKey)
		require.NotNil(t, spec.ContainerConcurrency, "%s: set containerConcurrency", what)
		cc := *spec.ContainerConcurrency
		if cc > 0 {
			require.LessOrEqual(t, target, cc, "%s: the target is above containerConcurrency", what)
		}
		maxCC[stage] = cc
		require.Positive(t, maxScale, what)

		require.NotNil(t, spec.TimeoutSeconds, "%s: set timeoutSeconds", what)
		require.NotNil(t, spec.ResponseStartTimeoutSeconds, "%s: a stage answers when its work has committed; without responseStartTimeoutSeconds Knative cuts it at 300 s", what)
		require.Equal(t, *spec.TimeoutSeconds, *spec.ResponseStartTimeoutSeconds, "%s: a stage answers only when done", what)

		require.Len(t, c.Ports, 1, what)
		require.Equal(t, int32(functionPort), c.Ports[0].ContainerPort, "%s: the function listens on %d", what, functionPort)
		require.NotNil(t, c.ReadinessProbe, what)
		require.NotNil(t, c.ReadinessProbe.HTTPGet, what)
		require.Equal(t, "/health/readiness", c.ReadinessProbe.HTTPGet.Path, "%s: func-go's readiness path", what)

		if slices.Contains(heavyStages, stage) {
			require.True(t, cc >= 1 && cc <= 2, "%s: one or two ffmpeg jobs per pod, got containerConcurrency %d", what, cc)
			require.GreaterOrEqual(t, *spec.TimeoutSeconds, int64(300), "%s: ffmpeg on a whole video takes minutes", what)
		}
	}
	require.Len(t, images, 1, "every stage runs the same image: %v", images)
	for stage, cc := range maxCC {
		if stage != "poll" && cc > 0 {
			require.True(t, maxCC["poll"] == 0 || maxCC["poll"] >= cc, "poll (many short I/O-bound calls) takes the most concurrent requests; %s takes more", stage)
		}
	}
}

func positiveInt(t *testing.T, what string, ann map[string]string, key string) int64 {
	t.Helper()
	v, ok := ann[key]
	require.True(t, ok, "%s: set %s", what, key)
	n, err := strconv.ParseInt(v, 10, 64)
	require.NoError(t, err, "%s: %s", what, key)
	require.Positive(t, n, "%s: %s", what, key)
	return n
}

// stageServices maps each stage to its Service: the one whose container
// named function sets STAGE to it. A STAGE outside the catalog fails.
func (b *bundle) stageServices(t *testing.T) map[string]*servingv1.Service {
	t.Helper()
	out := map[string]*servingv1.Service{}
	for _, s := range b.services {
		for _, c := range s.Spec.Template.Spec.Containers {
			if c.Name != "function" {
				continue
			}
			stage := literalEnv(c, "STAGE")
			require.Contains(t, catalog.Stages(), stage, "Service %s serves STAGE=%q, which is no stage of the catalog", s.Name, stage)
			require.NotContains(t, out, stage, "stage %s has two Services", stage)
			out[stage] = s
		}
	}
	return out
}

func literalEnv(c corev1.Container, name string) string {
	for _, e := range c.Env {
		if e.Name == name {
			return e.Value
		}
	}
	return ""
}

// checkAPI: the API Service is public and always warm.
func checkAPI(t *testing.T, b *bundle) {
	var api []*servingv1.Service
	for _, s := range b.services {
		for _, c := range s.Spec.Template.Spec.Containers {
			if c.Name == "api" {
				api = append(api, s)
			}
		}
	}
	require.Len(t, api, 1, "one Service runs the API")
	s := api[0]
	require.Len(t, s.Spec.Template.Spec.Containers, 1)
	require.Equal(t, "1", s.Spec.Template.Annotations[autoscaling.MinScaleAnnotationKey], "the API keeps one pod warm")
	positiveInt(t, "Service "+s.Name, s.Spec.Template.Annotations, autoscaling.MaxScaleAnnotationKey)
	require.NotEqual(t, serving.VisibilityClusterLocal, s.Labels[networking.VisibilityLabelKey], "the API is public")
	require.NotNil(t, s.Spec.Template.Spec.TimeoutSeconds)
}

// source is one source adapter container, parsed.
type source struct {
	deployment *appsv1.Deployment
	w          workload
	group      catalog.Group
	sink       string
}

// sources finds every `adapter source` container and parses its command.
func (b *bundle) sources(t *testing.T) []source {
	t.Helper()
	var out []source
	for _, w := range b.containers() {
		if r, err := roleOf(w); err != nil || r.name != roleSource.name {
			continue
		}
		groupName, sink, err := sourceArgs(w.c.Args)
		require.NoError(t, err, w.String())
		g, err := catalog.GroupByName(groupName)
		require.NoError(t, err, w.String())
		require.Equal(t, g.Name, groupName, "%s: name the group by its firm name", w)
		var d *appsv1.Deployment
		for _, dep := range b.deployments {
			if dep.Name == w.name {
				d = dep
			}
		}
		out = append(out, source{deployment: d, w: w, group: g, sink: sink})
	}
	return out
}

// checkSources: every consumer group of the catalog has exactly one
// adapter Deployment, whose sink is the cluster-local URL of the Service of
// the group's stage.
func checkSources(t *testing.T, b *bundle) {
	byStage := b.stageServices(t)
	byGroup := map[string]source{}
	for _, s := range b.sources(t) {
		require.NotContains(t, byGroup, s.group.Name, "group %s has two source adapters", s.group.Name)
		byGroup[s.group.Name] = s
		require.False(t, s.w.init, "%s: a source runs for good", s.w)
		require.Len(t, s.deployment.Spec.Template.Spec.Containers, 1, "%s: one adapter per Deployment", s.w)
	}
	for _, g := range catalog.Groups() {
		s, ok := byGroup[g.Name]
		require.True(t, ok, "consumer group %s has no source adapter (`adapter source --group %s --sink URL`)", g.Name, g.Name)
		svc, ok := byStage[g.Stage]
		require.True(t, ok, "group %s: stage %s has no Service", g.Name, g.Stage)
		require.Equal(t, clusterLocalURL(svc.Name, b.namespace), s.sink, "%s: the sink of %s is the Service of stage %s", s.w, g.Name, g.Stage)
	}
}

// checkDrain: every consumer group's dead-letter topic has exactly one
// drainer.
func checkDrain(t *testing.T, b *bundle) {
	drained := map[string]int{}
	for _, w := range b.containers() {
		if r, err := roleOf(w); err != nil || r.name != roleDrain.name {
			continue
		}
		name, err := drainGroup(w.c.Args)
		require.NoError(t, err, w.String())
		g, err := catalog.GroupByName(name)
		require.NoError(t, err, w.String())
		drained[g.Name]++
	}
	for _, g := range catalog.Groups() {
		require.Equal(t, 1, drained[g.Name], "dead letters of %s: want one `adapter dlq drain --group %s`", g.Name, g.Name)
	}
}

// checkRelay: the relay runs twice, and its pods first apply the schema and
// the topic catalog.
func checkRelay(t *testing.T, b *bundle) {
	var relays []workload
	for _, w := range b.containers() {
		if r, err := roleOf(w); err == nil && r.name == roleRelay.name {
			relays = append(relays, w)
		}
	}
	require.Len(t, relays, 1, "one Deployment runs `adapter relay`")
	w := relays[0]
	require.False(t, w.init)
	var d *appsv1.Deployment
	for _, dep := range b.deployments {
		if dep.Name == w.name {
			d = dep
		}
	}
	require.Equal(t, int32(2), *d.Spec.Replicas, "two relays share the outbox")
	var steps [][]string
	for _, c := range w.pod.InitContainers {
		steps = append(steps, c.Args)
	}
	require.Equal(t, [][]string{{"migrate", "up"}, {"topics", "apply"}}, steps, "the relay's init steps")
}

// checkPing: a PingSource wakes the reconcile stage's Service.
func checkPing(t *testing.T, b *bundle) {
	require.Len(t, b.pingSources, 1)
	p := b.pingSources[0]
	reconcile, ok := b.stageServices(t)["reconcile"]
	require.True(t, ok)
	ref := p.Spec.Sink.Ref
	require.NotNil(t, ref, "PingSource %s: sink by reference, so it follows the Service's address", p.Name)
	require.Nil(t, p.Spec.Sink.URI)
	require.Equal(t, "serving.knative.dev/v1", ref.APIVersion)
	require.Equal(t, "Service", ref.Kind)
	require.Equal(t, reconcile.Name, ref.Name)
	require.Contains(t, []string{"", b.namespace}, ref.Namespace)
	require.NotEmpty(t, p.Spec.Schedule)
}

// checkNoSecrets: no Secret object is part of the manifests, and no
// ConfigMap holds a credential.
func checkNoSecrets(t *testing.T, b *bundle) {
	for _, s := range b.secrets {
		require.Failf(t, "a Secret is part of the manifests", "Secret %s: secrets are created outside the kustomization (base/secrets.example.env)", s.Name)
	}
	for _, cm := range b.configMaps {
		require.Empty(t, cm.BinaryData, "ConfigMap %s", cm.Name)
		for k, v := range cm.Data {
			require.False(t, secretName.MatchString(k), "ConfigMap %s holds %s, a credential: put it in the Secret %s", cm.Name, k, secretRef)
			require.False(t, hasPassword(v), "ConfigMap %s: %s carries a password", cm.Name, k)
		}
	}
}

func hasPassword(v string) bool {
	i := strings.Index(v, "://")
	if i < 0 {
		return false
	}
	userinfo, _, found := strings.Cut(v[i+3:], "@")
	return found && strings.Contains(userinfo, ":")
}

// checkEnvironment: every container's environment is exactly what its
// binary's Config reads (checkEnv), and it loads: config.Load accepts it
// with the example Secret's placeholders. The loaded values must then
// agree with the manifests around them: each adapter's ops address is a
// port its probes use, and each source adapter can wait out its stage.
func checkEnvironment(t *testing.T, b *bundle) {
	secrets := secretExample(t)
	byStage := b.stageServices(t)
	workers := map[string]int{} // per stage, over its groups' adapters
	for _, w := range b.containers() {
		r, err := roleOf(w)
		require.NoError(t, err)
		for _, err := range checkEnv(b, w, r, secrets) {
			t.Error(err)
		}
		var cfg config.Validator
		t.Run(w.name+"/"+w.c.Name, func(t *testing.T) {
			cfg, err = loadConfig(t, r, resolveEnv(b, w, secrets))
		})
		require.NoError(t, err, "%s (%s): its environment does not load", w, r.name)

		switch cfg := cfg.(type) {
		case *config.APIServer:
			requirePort(t, w, cfg.Addr, "API_ADDR")
			// Knative's queue-proxy runs the readiness probe on the port it
			// names: the ops server's, where /readyz is.
			_, ops, err := net.SplitHostPort(cfg.HTTPAddr)
			require.NoError(t, err)
			p := w.c.ReadinessProbe
			require.True(t, p != nil && p.HTTPGet != nil && p.HTTPGet.Path == "/readyz" && p.HTTPGet.Port.String() == ops,
				"%s: readinessProbe GET /readyz on the HTTP_ADDR port %s", w, ops)
		case *config.SourceCommand:
			requireOpsPort(t, w, cfg.Ops)
			group, _, err := sourceArgs(w.c.Args)
			require.NoError(t, err)
			g, err := catalog.GroupByName(group)
			require.NoError(t, err)
			svc := byStage[g.Stage]
			require.NotNil(t, svc, "stage %s", g.Stage)
			timeout := time.Duration(*svc.Spec.Template.Spec.TimeoutSeconds) * time.Second
			require.GreaterOrEqual(t, cfg.HandlerTimeout, timeout+cfg.ColdStart,
				"%s: SOURCE_HANDLER_TIMEOUT must cover a cold start (SOURCE_COLD_START %s) plus Service %s's timeoutSeconds (%s), or the adapter gives up on deliveries that succeed",
				w, cfg.ColdStart, svc.Name, timeout)
			workers[g.Stage] += cfg.Workers * int(*deploymentOf(b, w).Spec.Replicas)
		case *config.RelayCommand:
			requireOpsPort(t, w, cfg.Ops)
		case *config.DrainCommand:
			requireOpsPort(t, w, cfg.Ops)
		}
	}
	// An adapter never has more deliveries in flight than its stage's
	// Service takes at max-scale: the excess would wait in Knative's queues
	// and spend its handler timeout there.
	for stage, n := range workers {
		spec := byStage[stage].Spec.Template
		cc := *spec.Spec.ContainerConcurrency
		if cc == 0 {
			continue // unbounded per pod
		}
		maxScale, err := strconv.ParseInt(spec.Annotations[autoscaling.MaxScaleAnnotationKey], 10, 64)
		require.NoError(t, err)
		require.LessOrEqual(t, int64(n), cc*maxScale,
			"stage %s: its adapters run %d deliveries at once (SOURCE_WORKERS x replicas), its Service takes %d (containerConcurrency %d x max-scale %d)",
			stage, n, cc*maxScale, cc, maxScale)
	}
}

func deploymentOf(b *bundle, w workload) *appsv1.Deployment {
	for _, d := range b.deployments {
		if d.Name == w.name {
			return d
		}
	}
	panic(fmt.Sprintf("no Deployment %s", w.name))
}

// requireOpsPort: the ops server's address is a declared port of the
// container, and the probes use it.
func requireOpsPort(t *testing.T, w workload, ops config.Ops) {
	t.Helper()
	port := requirePort(t, w, ops.HTTPAddr, "HTTP_ADDR")
	for _, p := range []*corev1.Probe{w.c.ReadinessProbe, w.c.LivenessProbe} {
		got, ok := portOf(w.c, p.HTTPGet.Port)
		require.True(t, ok && got == port, "%s: probes must reach the ops server on %d", w, port)
	}
}

// requirePort: addr's port is a declared port of the container.
func requirePort(t *testing.T, w workload, addr, variable string) int32 {
	t.Helper()
	_, p, err := net.SplitHostPort(addr)
	require.NoError(t, err, "%s: %s=%q", w, variable, addr)
	port, err := strconv.ParseInt(p, 10, 32)
	require.NoError(t, err, "%s: %s=%q", w, variable, addr)
	want := int32(port)
	ports := w.c.Ports
	if w.kind == "Service" && len(ports) == 0 {
		ports = []corev1.ContainerPort{{ContainerPort: functionPort}} // Knative's default
	}
	for _, cp := range ports {
		if cp.ContainerPort == want {
			return want
		}
	}
	require.Failf(t, "port not declared", "%s: %s=%s listens on %d, which the container does not declare", w, variable, addr, want)
	return 0
}
