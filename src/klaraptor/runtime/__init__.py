"""The per-call stages: the Selector (the argmin over the candidates for a D, the per-D cache,
the invocation history) and the launcher (read D from a call, select, launch, online
refinement)."""
