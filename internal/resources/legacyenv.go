package resources

import (
	"strings"

	appsv1 "k8s.io/api/apps/v1"
	corev1 "k8s.io/api/core/v1"
	appsv1ac "k8s.io/client-go/applyconfigurations/apps/v1"
	corev1ac "k8s.io/client-go/applyconfigurations/core/v1"
	"k8s.io/utils/ptr"

	"github.com/dbkeeper/dbkeeper/internal/engine"
)

// PinLegacyEnv keeps, in the desired StatefulSet, the initdb-only
// environment (engine.LegacyEnvPrefix: POSTGRES_USER, POSTGRES_PASSWORD,
// POSTGRES_DB) of an existing StatefulSet made before issue 17, which read
// the application's credentials Secret: initdb has run, the image never
// reads them again, and changing them would restart every pod of every
// existing Database on upgrade for nothing
// (docs/design/roles-and-rotation.md, D6). The other variables are the
// desired ones, in the live order. A StatefulSet whose POSTGRES_USER
// already reads the desired Secret, or none at all, is left as desired.
func PinLegacyEnv(desired *appsv1ac.StatefulSetApplyConfiguration, live *appsv1.StatefulSet) {
	if live == nil || desired.Spec == nil || desired.Spec.Template == nil || desired.Spec.Template.Spec == nil {
		return
	}
	var liveEnv []corev1.EnvVar
	for _, c := range live.Spec.Template.Spec.Containers {
		if c.Name == EngineContainer {
			liveEnv = c.Env
		}
	}
	var want *corev1ac.ContainerApplyConfiguration
	for i := range desired.Spec.Template.Spec.Containers {
		if c := &desired.Spec.Template.Spec.Containers[i]; c.Name != nil && *c.Name == EngineContainer {
			want = c
		}
	}
	if want == nil || !legacyEnv(liveEnv, want.Env) {
		return
	}
	byName := map[string]corev1ac.EnvVarApplyConfiguration{}
	for _, e := range want.Env {
		byName[ptr.Deref(e.Name, "")] = e
	}
	pinned := make([]corev1ac.EnvVarApplyConfiguration, 0, len(liveEnv)+len(want.Env))
	for _, e := range liveEnv {
		switch d, ok := byName[e.Name]; {
		case strings.HasPrefix(e.Name, engine.LegacyEnvPrefix):
			pinned = append(pinned, *envApply([]corev1.EnvVar{e})[0])
		case ok:
			pinned = append(pinned, d)
		default:
			continue
		}
		delete(byName, e.Name)
	}
	for _, e := range want.Env {
		if _, left := byName[ptr.Deref(e.Name, "")]; left {
			pinned = append(pinned, e)
		}
	}
	want.Env = pinned
}

// legacyEnv says whether the live environment's POSTGRES_USER reads
// another Secret than the desired one's.
func legacyEnv(live []corev1.EnvVar, desired []corev1ac.EnvVarApplyConfiguration) bool {
	const user = engine.LegacyEnvPrefix + "USER"
	var liveSecret, wantSecret string
	for _, e := range live {
		if e.Name == user && e.ValueFrom != nil && e.ValueFrom.SecretKeyRef != nil {
			liveSecret = e.ValueFrom.SecretKeyRef.Name
		}
	}
	for _, e := range desired {
		if ptr.Deref(e.Name, "") == user && e.ValueFrom != nil && e.ValueFrom.SecretKeyRef != nil {
			wantSecret = ptr.Deref(e.ValueFrom.SecretKeyRef.Name, "")
		}
	}
	return liveSecret != "" && liveSecret != wantSecret
}
