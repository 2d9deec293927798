package kubeapi_test

import (
	appsv1 "k8s.io/api/apps/v1"

	wt "github.com/noetl/ehdb-election/webhook/webhooktest"
)

const ns = wt.Namespace

var gvkSTS = appsv1.SchemeGroupVersion.WithKind("StatefulSet")
