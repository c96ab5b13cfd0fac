"""Injecting tfboot into Pods whose images nobody rebuilds (docs/inject.md): ``template``
(what is added), ``patch`` (adding and removing it on parsed objects), ``yamltext`` (writing
the change back into the text), ``interpreter`` (commands that keep the hook out),
``command`` (``tfboot inject`` and ``uninject``) and ``hook`` (the injected
``sitecustomize``). Nothing is imported here: ``tfboot manifests`` reads the template."""
