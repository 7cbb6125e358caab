"""The GUI's view models: plain values and Qt item models the widgets show and the controllers
build (messages, the chat list, a turn's and a chat's figures, titles, Markdown rendering, model
names). No widget lives here: these modules import neither QtWidgets nor the window's widgets,
dialogs, controllers or bindings."""
