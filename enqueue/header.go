package enqueue

// TenantHeader is the asynq task header that carries the tenant a task was
// admitted for. Enqueue sets it; the worker package reads it.
const TenantHeader = "admitq-tenant"
