package webhook

// Cloud-identity annotations: a ServiceAccount carrying one is a cloud principal, and reusing it
// for the writer hands the writer that principal's cloud permissions.
var cloudIdentityAnnotations = []string{
	"iam.gke.io/gcp-service-account",
	"eks.amazonaws.com/role-arn",
	"azure.workload.identity/client-id",
}
