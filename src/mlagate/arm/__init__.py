"""An arm: what it is by content (`armidentity`), how it is installed (`installing`), the
content-addressed cache of installed arms (`arms`) and arm packs (`packs`)."""
