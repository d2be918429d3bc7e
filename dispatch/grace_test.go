package dispatch_test

import "github.com/admitq/admitq/dispatch"

const dispatchGrace = dispatch.Grace
