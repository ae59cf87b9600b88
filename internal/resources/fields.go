package resources

import "strings"

// specFields maps the fields of a child object, by kind and field path
// prefix, to the Database field that sets them. The user can only fix the
// Database, so a message about a child the API server refused names the
// Database field.
var specFields = map[string][]struct{ child, spec string }{
	"StatefulSet": {
		{"spec.replicas", "spec.replicas"},
		{"spec.template.spec.containers[0].image", "spec.image (or spec.version)"},
		{"spec.template.spec.containers[0].resources", "spec.resources"},
		{"spec.template.spec.volumes", "spec.resources.limits.memory"},
		{"spec.template.spec.affinity", "spec.affinity"},
		{"spec.template.spec.tolerations", "spec.tolerations"},
		{"spec.template.spec.nodeSelector", "spec.nodeSelector"},
		{"spec.template.spec.topologySpreadConstraints", "spec.topologySpreadConstraints"},
		{"spec.template.spec.priorityClassName", "spec.priorityClassName"},
		{"spec.volumeClaimTemplates", "spec.storage"},
	},
	"Service": {
		{"metadata.annotations", "spec.service.annotations"},
		{"spec.type", "spec.service.type"},
		{"spec.loadBalancer", "spec.service"},
	},
	"CronJob": {
		{"spec.schedule", "spec.backup.schedule"},
		{"spec.jobTemplate.spec.template.spec.containers[0].image", "spec.image (or spec.version)"},
	},
	"Job": {
		{"spec.template.spec.containers[0].image", "spec.image (or spec.version)"},
	},
	"PersistentVolumeClaim": {
		{"spec.resources", "spec.backup.storage.size"},
		{"spec.storageClassName", "spec.backup.storage.storageClassName"},
	},
}

// SpecField is the Database field that sets childField of a child of the
// given kind, or "" when no Database field does.
func SpecField(kind, childField string) string {
	for _, f := range specFields[kind] {
		if childField == f.child || strings.HasPrefix(childField, f.child+".") || strings.HasPrefix(childField, f.child+"[") {
			return f.spec
		}
	}
	return ""
}
