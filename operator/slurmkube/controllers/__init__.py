"""kopf handlers: each observes, calls a pure planner, applies. No policy here."""
