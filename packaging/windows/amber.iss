; Amber for Windows: Inno Setup 6 script (packaging/build.sh calls `iscc` with the /D values below).
;   iscc /DAppVersion=0.1.0 /DSourceDir=build\package\dist-cpu\Amber /DOutputDir=dist ^
;        /DIconFile=build\package\icons\amber.ico [/DVariantSuffix=-gpu] packaging\windows\amber.iss
; Per-user install (no administrator rights) into %LOCALAPPDATA%\Programs\Amber, a Start menu
; entry, an optional desktop icon, and an uninstaller that asks whether to keep the user's chats
; (%LOCALAPPDATA%\Amber: database, models, sessions, settings); silent uninstalls keep them.

#ifndef AppVersion
  #define AppVersion "0.0.0"
#endif
#ifndef SourceDir
  #define SourceDir "..\..\build\package\dist-cpu\Amber"
#endif
#ifndef OutputDir
  #define OutputDir "..\..\dist"
#endif
#ifndef IconFile
  #define IconFile "..\..\build\package\icons\amber.ico"
#endif
#ifndef VariantSuffix
  #define VariantSuffix ""
#endif

[Setup]
; The same AppId for both variants: installing one replaces the other.
AppId={{7F3C2A4E-6B1D-4C8E-9A57-2D4E8B1C0F93}
AppName=Amber
AppVersion={#AppVersion}
AppVerName=Amber {#AppVersion}
AppPublisher=Amber developers
AppPublisherURL=https://github.com/amber-chat/amber
VersionInfoVersion={#AppVersion}
DefaultDirName={autopf}\Amber
DefaultGroupName=Amber
DisableProgramGroupPage=yes
DisableDirPage=auto
PrivilegesRequired=lowest
OutputDir={#OutputDir}
OutputBaseFilename=Amber-Setup-{#AppVersion}{#VariantSuffix}
SetupIconFile={#IconFile}
UninstallDisplayIcon={app}\Amber.exe
UninstallDisplayName=Amber
Compression=lzma2/max
SolidCompression=yes
LZMAUseSeparateProcess=yes
ArchitecturesAllowed=x64compatible
ArchitecturesInstallIn64BitMode=x64compatible
MinVersion=10.0
WizardStyle=modern
CloseApplications=yes
RestartApplications=no

[Languages]
Name: "english"; MessagesFile: "compiler:Default.isl"

[Tasks]
Name: "desktopicon"; Description: "{cm:CreateDesktopIcon}"; GroupDescription: "{cm:AdditionalIcons}"; Flags: unchecked

[InstallDelete]
; an update replaces the whole bundle (no stale DLLs from an older version or the other variant)
Type: filesandordirs; Name: "{app}\_internal"

[Files]
Source: "{#SourceDir}\*"; DestDir: "{app}"; Flags: ignoreversion recursesubdirs createallsubdirs

[Icons]
Name: "{autoprograms}\Amber"; Filename: "{app}\Amber.exe"; Comment: "Chat with local language models"
Name: "{autodesktop}\Amber"; Filename: "{app}\Amber.exe"; Tasks: desktopicon

[Run]
Filename: "{app}\Amber.exe"; Description: "{cm:LaunchProgram,Amber}"; Flags: nowait postinstall skipifsilent

[UninstallDelete]
Type: filesandordirs; Name: "{app}\_internal"

[Code]
function UserDataDir(): String;
begin
  { platformdirs.user_data_dir("Amber", appauthor=False) on Windows }
  Result := ExpandConstant('{localappdata}\Amber');
end;

procedure CurUninstallStepChanged(CurUninstallStep: TUninstallStep);
var
  Dir: String;
begin
  if CurUninstallStep <> usPostUninstall then
    exit;
  Dir := UserDataDir();
  if not DirExists(Dir) then
    exit;
  if UninstallSilent() then
    exit;   { silent uninstalls (updates, IT tools) never delete the user's chats }
  if MsgBox('Amber has been removed.' + #13#10#13#10 +
            'Do you also want to delete your chats, downloaded models and settings?' + #13#10 +
            Dir + #13#10#13#10 +
            'Choose No to keep them for a later installation.',
            mbConfirmation, MB_YESNO or MB_DEFBUTTON2) = IDYES then
  begin
    if not DelTree(Dir, True, True, True) then
      MsgBox('Some files in ' + Dir + ' could not be deleted.', mbInformation, MB_OK);
  end;
end;
